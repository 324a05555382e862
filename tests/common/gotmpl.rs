//! A renderer for the subset of Go templates (text/template + the Sprig functions Helm adds) that
//! `charts/raygate` uses, so CI can render the chart without `helm` (not installable here: no Go
//! module proxy, no Debian package).
//!
//! It follows Helm's semantics where they matter and refuses, rather than approximates, the rest:
//! - actions `{{ }}` with `{{-`/`-}}` whitespace trimming, comments `{{/* */}}`;
//! - `if`/`else`/`else if`/`end`; truthiness as Go's (false, 0, "", empty list/map, nil);
//! - pipelines `a | f b` (the piped value is the last argument), parenthesised sub-pipelines;
//! - fields `.Values.a.b`, `.Release.Namespace`, `.Chart.AppVersion`; string, number, bool
//!   literals;
//! - functions `eq ne not and or default toYaml indent nindent quote int int64`.
//!
//! Helm reads values.yaml numbers as float64, which text/template prints as `1e+06` from a million
//! up: printing such a number is an error here (the chart passes numbers through `int64`).
//! Printing a missing value is an error too (Helm would print nothing: almost always a typo).

use serde_json::{Map, Value};

#[derive(Debug)]
enum Node {
    Text(String),
    Print(Pipeline),
    If {
        cond: Pipeline,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

#[derive(Debug, Clone)]
enum Operand {
    Field(Vec<String>),
    Literal(Value),
    Function(String),
    Sub(Pipeline),
}

type Command = Vec<Operand>;
type Pipeline = Vec<Command>;

/// One `{{ }}` after lexing: its words, or a comment.
#[derive(Debug)]
enum Action {
    Comment,
    Words(String),
}

enum Piece {
    Text(String),
    Action(Action),
}

/// Splits the template into text and actions, applying the trim markers.
fn lex(src: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut text = &rest[..start];
        if trim_next {
            text = text.trim_start();
        }
        let after = &rest[start + 2..];
        let (trim_before, inner_start) = match after.strip_prefix("- ") {
            Some(_) => (true, 2),
            None => (false, 0),
        };
        if trim_before {
            text = text.trim_end();
        }
        pieces.push(Piece::Text(text.to_string()));
        let inner_all = &after[inner_start..];
        let end = inner_all
            .find("}}")
            .ok_or_else(|| format!("unclosed action near {:?}", &rest[start..]))?;
        let mut inner = &inner_all[..end];
        trim_next = false;
        if let Some(stripped) = inner.strip_suffix(" -") {
            inner = stripped;
            trim_next = true;
        }
        let inner = inner.trim();
        if inner.starts_with("/*") {
            if !inner.ends_with("*/") {
                return Err(format!("unclosed comment {inner:?}"));
            }
            pieces.push(Piece::Action(Action::Comment));
        } else {
            pieces.push(Piece::Action(Action::Words(inner.to_string())));
        }
        rest = &inner_all[end + 2..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    pieces.push(Piece::Text(text.to_string()));
    Ok(pieces)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Str(String),
    Pipe,
    Open,
    Close,
}

fn tokens(src: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = src.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            ' ' | '\t' | '\n' => {
                chars.next();
            }
            '|' => {
                chars.next();
                out.push(Token::Pipe);
            }
            '(' => {
                chars.next();
                out.push(Token::Open);
            }
            ')' => {
                chars.next();
                out.push(Token::Close);
            }
            '"' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err(format!("unterminated string in {src:?}")),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some(e @ ('"' | '\\')) => s.push(e),
                            other => return Err(format!("escape \\{other:?} in {src:?}")),
                        },
                        Some(ch) => s.push(ch),
                    }
                }
                out.push(Token::Str(s));
            }
            _ => {
                let mut w = String::new();
                while let Some(&ch) = chars.peek() {
                    if matches!(ch, ' ' | '\t' | '\n' | '|' | '(' | ')' | '"') {
                        break;
                    }
                    w.push(ch);
                    chars.next();
                }
                out.push(Token::Word(w));
            }
        }
    }
    Ok(out)
}

fn parse_pipeline(toks: &[Token], pos: &mut usize) -> Result<Pipeline, String> {
    let mut pipeline = vec![parse_command(toks, pos)?];
    while toks.get(*pos) == Some(&Token::Pipe) {
        *pos += 1;
        pipeline.push(parse_command(toks, pos)?);
    }
    Ok(pipeline)
}

fn parse_command(toks: &[Token], pos: &mut usize) -> Result<Command, String> {
    let mut cmd = Vec::new();
    while let Some(tok) = toks.get(*pos) {
        let operand = match tok {
            Token::Pipe | Token::Close => break,
            Token::Open => {
                *pos += 1;
                let sub = parse_pipeline(toks, pos)?;
                if toks.get(*pos) != Some(&Token::Close) {
                    return Err("missing )".into());
                }
                Operand::Sub(sub)
            }
            Token::Str(s) => Operand::Literal(Value::String(s.clone())),
            Token::Word(w) => word(w)?,
        };
        *pos += 1;
        cmd.push(operand);
    }
    if cmd.is_empty() {
        return Err("empty command".into());
    }
    Ok(cmd)
}

fn word(w: &str) -> Result<Operand, String> {
    if w == "." {
        return Ok(Operand::Field(vec![]));
    }
    if let Some(path) = w.strip_prefix('.') {
        return Ok(Operand::Field(
            path.split('.').map(str::to_string).collect(),
        ));
    }
    match w {
        "true" => return Ok(Operand::Literal(Value::Bool(true))),
        "false" => return Ok(Operand::Literal(Value::Bool(false))),
        _ => {}
    }
    if let Ok(n) = w.parse::<i64>() {
        return Ok(Operand::Literal(Value::from(n)));
    }
    if w.chars().all(|c| c.is_ascii_alphanumeric()) && !w.is_empty() {
        return Ok(Operand::Function(w.to_string()));
    }
    Err(format!("unsupported word {w:?}"))
}

fn parse_words(words: &str) -> Result<Pipeline, String> {
    let toks = tokens(words)?;
    let mut pos = 0;
    let pipeline = parse_pipeline(&toks, &mut pos)?;
    if pos != toks.len() {
        return Err(format!("trailing tokens in {words:?}"));
    }
    Ok(pipeline)
}

/// Parses nodes until `end` or `else` (returned as the terminator) or the end of input.
fn parse_nodes(
    pieces: &mut std::iter::Peekable<std::vec::IntoIter<Piece>>,
) -> Result<(Vec<Node>, Option<String>), String> {
    let mut nodes = Vec::new();
    while let Some(piece) = pieces.next() {
        match piece {
            Piece::Text(t) => nodes.push(Node::Text(t)),
            Piece::Action(Action::Comment) => {}
            Piece::Action(Action::Words(w)) => {
                if w == "end" || w == "else" || w.starts_with("else if ") {
                    return Ok((nodes, Some(w)));
                }
                if let Some(cond) = w.strip_prefix("if ") {
                    nodes.push(parse_if(cond, pieces)?);
                } else {
                    let first = w.split_whitespace().next().unwrap_or("");
                    if matches!(
                        first,
                        "range" | "with" | "define" | "template" | "block" | "include"
                    ) || first.starts_with('$')
                    {
                        return Err(format!("{{{{ {w} }}}} is outside the supported subset"));
                    }
                    nodes.push(Node::Print(parse_words(&w)?));
                }
            }
        }
    }
    Ok((nodes, None))
}

fn parse_if(
    cond: &str,
    pieces: &mut std::iter::Peekable<std::vec::IntoIter<Piece>>,
) -> Result<Node, String> {
    let cond = parse_words(cond)?;
    let (then, terminator) = parse_nodes(pieces)?;
    let otherwise = match terminator.as_deref() {
        Some("end") => vec![],
        Some("else") => {
            let (otherwise, t) = parse_nodes(pieces)?;
            if t.as_deref() != Some("end") {
                return Err("else without end".into());
            }
            otherwise
        }
        Some(w) if w.starts_with("else if ") => {
            vec![parse_if(&w["else ".len()..]["if ".len()..], pieces)?]
        }
        _ => return Err("if without end".into()),
    };
    Ok(Node::If {
        cond,
        then,
        otherwise,
    })
}

/// Renders `template` with `data` as `.`.
pub fn render(template: &str, data: &Value) -> Result<String, String> {
    let mut pieces = lex(template)?.into_iter().peekable();
    let (nodes, terminator) = parse_nodes(&mut pieces)?;
    if let Some(t) = terminator {
        return Err(format!("{{{{ {t} }}}} without if"));
    }
    let mut out = String::new();
    exec(&nodes, data, &mut out)?;
    Ok(out)
}

fn exec(nodes: &[Node], data: &Value, out: &mut String) -> Result<(), String> {
    for node in nodes {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Print(p) => out.push_str(&print(&eval(p, data)?)?),
            Node::If {
                cond,
                then,
                otherwise,
            } => {
                if truthy(&eval(cond, data)?) {
                    exec(then, data, out)?;
                } else {
                    exec(otherwise, data, out)?;
                }
            }
        }
    }
    Ok(())
}

fn eval(pipeline: &Pipeline, data: &Value) -> Result<Value, String> {
    let mut piped: Option<Value> = None;
    for cmd in pipeline {
        let value = match &cmd[0] {
            Operand::Function(name) => {
                let mut args = cmd[1..]
                    .iter()
                    .map(|o| operand(o, data))
                    .collect::<Result<Vec<_>, _>>()?;
                args.extend(piped.take());
                call(name, args)?
            }
            single => {
                if cmd.len() > 1 || piped.is_some() {
                    return Err(format!("{cmd:?} is not a function call"));
                }
                operand(single, data)?
            }
        };
        piped = Some(value);
    }
    piped.ok_or_else(|| "empty pipeline".to_string())
}

fn operand(o: &Operand, data: &Value) -> Result<Value, String> {
    match o {
        Operand::Literal(v) => Ok(v.clone()),
        Operand::Sub(p) => eval(p, data),
        Operand::Function(name) => call(name, vec![]),
        Operand::Field(path) => {
            let mut v = data;
            for (i, key) in path.iter().enumerate() {
                v = match v {
                    Value::Object(m) => m.get(key).unwrap_or(&Value::Null),
                    _ => {
                        return Err(format!(
                            "nil pointer evaluating .{}: .{} is not a map",
                            path.join("."),
                            path[..i].join(".")
                        ));
                    }
                };
            }
            Ok(v.clone())
        }
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

fn arity(name: &str, args: &[Value], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!("{name} takes {n} arguments, got {}", args.len()))
    }
}

fn call(name: &str, args: Vec<Value>) -> Result<Value, String> {
    match name {
        "eq" | "ne" => {
            arity(name, &args, 2)?;
            let same = match (&args[0], &args[1]) {
                (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
                (a, b) => a == b,
            };
            Ok(Value::Bool(same == (name == "eq")))
        }
        "not" => {
            arity(name, &args, 1)?;
            Ok(Value::Bool(!truthy(&args[0])))
        }
        // Go's and/or return the deciding argument.
        "and" => Ok(args
            .iter()
            .find(|a| !truthy(a))
            .or(args.last())
            .cloned()
            .unwrap_or(Value::Null)),
        "or" => Ok(args
            .iter()
            .find(|a| truthy(a))
            .or(args.last())
            .cloned()
            .unwrap_or(Value::Null)),
        "default" => {
            arity(name, &args, 2)?;
            Ok(if truthy(&args[1]) {
                args[1].clone()
            } else {
                args[0].clone()
            })
        }
        "toYaml" => {
            arity(name, &args, 1)?;
            Ok(Value::String(to_yaml(&args[0])?))
        }
        "indent" | "nindent" => {
            arity(name, &args, 2)?;
            let n = args[0]
                .as_u64()
                .ok_or_else(|| format!("{name}: width {} is not a count", args[0]))?;
            let text = print(&args[1])?;
            let pad = " ".repeat(n as usize);
            let indented = format!("{pad}{}", text.replace('\n', &format!("\n{pad}")));
            Ok(Value::String(if name == "nindent" {
                format!("\n{indented}")
            } else {
                indented
            }))
        }
        "quote" => {
            arity(name, &args, 1)?;
            Ok(Value::String(
                serde_json::to_string(&print(&args[0])?).map_err(|e| e.to_string())?,
            ))
        }
        "int" | "int64" => {
            arity(name, &args, 1)?;
            let n = match &args[0] {
                Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
                Value::String(s) => s.parse::<f64>().unwrap_or(0.0),
                Value::Bool(b) => f64::from(u8::from(*b)),
                _ => 0.0,
            };
            if !n.is_finite() || n.abs() >= 9.0e15 {
                return Err(format!("{name}: {n} is out of range"));
            }
            Ok(Value::from(n.trunc() as i64))
        }
        other => Err(format!(
            "function {other:?} is outside the supported subset"
        )),
    }
}

/// How text/template prints a value (Helm's data: strings, float64, bool, maps, lists).
fn print(v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => {
            if let Some(i) = n.as_i64().filter(|_| !n.is_f64()) {
                return Ok(i.to_string());
            }
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f.abs() < 1.0e6 {
                Ok(format!("{f:.0}"))
            } else {
                Err(format!(
                    "Helm would print the float64 {f} in Go's %v form (e.g. 1e+06): pass it through int64"
                ))
            }
        }
        Value::Null => Err("printing a missing value (Helm prints nothing)".into()),
        Value::Array(_) | Value::Object(_) => Err(format!(
            "printing {v} would give Go's map[...] form: use toYaml"
        )),
    }
}

/// Sprig's toYaml: block-style YAML, keys sorted (as Go's yaml does), no trailing newline.
pub fn to_yaml(v: &Value) -> Result<String, String> {
    let mut lines = Vec::new();
    yaml_lines(v, 0, &mut lines)?;
    Ok(lines.join("\n"))
}

fn scalar(v: &Value) -> Result<String, String> {
    Ok(match v {
        // A JSON string is a YAML double-quoted scalar.
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Object(m) if m.is_empty() => "{}".into(),
        // Go's yaml writes a float64 in strconv's shortest 'g' form: 100, 0.5, 1e+06.
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f.abs() < 1.0e6 {
                format!("{f:.0}")
            } else if f.abs() < 1.0e6 && f.abs() >= 1.0e-4 {
                f.to_string()
            } else {
                return Err(format!("toYaml of {f}: Go writes it in exponent form"));
            }
        }
        other => other.to_string(),
    })
}

fn is_block(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
        _ => false,
    }
}

fn yaml_lines(v: &Value, indent: usize, out: &mut Vec<String>) -> Result<(), String> {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) if !m.is_empty() => {
            let sorted: Map<String, Value> = m.clone().into_iter().collect();
            let mut keys: Vec<&String> = sorted.keys().collect();
            keys.sort();
            for k in keys {
                let child = &sorted[k];
                let key = Value::String(k.clone()).to_string();
                if is_block(child) {
                    out.push(format!("{pad}{key}:"));
                    // Go's yaml puts a list at its key's indentation.
                    let child_indent = if child.is_array() { indent } else { indent + 2 };
                    yaml_lines(child, child_indent, out)?;
                } else {
                    out.push(format!("{pad}{key}: {}", scalar(child)?));
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for item in a {
                let mut sub = Vec::new();
                yaml_lines(item, indent + 2, &mut sub)?;
                if let Some(first) = sub.first_mut() {
                    *first = format!("{pad}- {}", &first[indent + 2..]);
                }
                out.extend(sub);
            }
        }
        scalar_value => out.push(format!("{pad}{}", scalar(scalar_value)?)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn trims_conditions_and_pipes_as_helm_does() {
        let data = json!({"Values": {"on": true, "n": 8080.0, "big": 1000000.0, "tag": "", "m": {"b": "x", "a": [1, {"k": "v"}]}},
                          "Chart": {"AppVersion": "v1"}});
        let t = "a:\n  {{- if .Values.on }}\n  b: {{ .Values.tag | default .Chart.AppVersion }}\n  {{- end }}\n  p: {{ int64 .Values.n }}\n  m:\n    {{- toYaml .Values.m | nindent 4 }}\n";
        assert_eq!(
            render(t, &data).unwrap(),
            "a:\n  b: v1\n  p: 8080\n  m:\n    \"a\":\n    - 1\n    - \"k\": \"v\"\n    \"b\": \"x\"\n"
        );
        assert!(render("{{ .Values.missing }}", &data).is_err());
        assert!(render("{{ .Values.big }}", &data).is_err());
        assert_eq!(render("{{ int64 .Values.big }}", &data).unwrap(), "1000000");
        assert_eq!(
            render(
                "{{ if and (eq .Values.tag \"\") (not .Values.off) }}y{{ else }}n{{ end }}",
                &data
            )
            .unwrap(),
            "y"
        );
    }
}

#!/usr/bin/env python3
"""`helm template` and `helm lint` through Helm's own library (helm-python-sdk, see
hack/install-helm.sh).

Usage: helm-template.py CHART NAME NAMESPACE < values.json
Prints the rendered files as one JSON object {template path: text} (NOTES.txt included), after
Helm's values.schema.json check. A render or schema failure prints Helm's message on stderr and
exits 2.

Usage: helm-template.py --lint CHART NAMESPACE < values.json
Prints `helm lint --strict`'s report as JSON ({"messages": [{severity, path, error}], "errors"}).
"""
import json
import sys

import helm_python
from helm_python.chart import Chart


def main() -> int:
    if sys.argv[1] == "--lint":
        chart_dir, namespace = sys.argv[2:4]
        report = helm_python.lint(
            chart_dir, values=json.load(sys.stdin), strict=True, namespace=namespace
        )
        json.dump(report, sys.stdout)
        return 0
    chart_dir, name, namespace = sys.argv[1:4]
    values = json.load(sys.stdin)
    try:
        chart = Chart.load(chart_dir)
        rendered = chart.render(values=values, name=name, namespace=namespace, is_install=True)
    except helm_python.HelmError as e:
        print(e, file=sys.stderr)
        return 2
    json.dump(rendered, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

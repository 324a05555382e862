#!/usr/bin/env python3
"""`helm template` through Helm's own library (helm-python-sdk, see hack/install-helm.sh).

Usage: helm-template.py CHART NAME NAMESPACE < values.json
Prints the rendered files as one JSON object {template path: text} (NOTES.txt included), after
Helm's values.schema.json check. A render or schema failure prints Helm's message on stderr and
exits 2.
"""
import json
import sys

import helm_python
from helm_python.chart import Chart


def main() -> int:
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

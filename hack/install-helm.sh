#!/usr/bin/env bash
# Helm's own template engine for the chart tests (tests/deploy_manifests.rs renders charts/raygate
# with it): the `helm` binary is in no registry this machine reaches, but PyPI's helm-python-sdk
# ships Helm v4's library (libhelm_c.so) with Python bindings. Installed into its own virtualenv,
# pinned; idempotent (returns at once when it imports). hack/helm-template.py drives it.
set -euo pipefail
VERSION=0.2.2
VENV=${RAYGATE_HELM_VENV:-$HOME/.cache/raygate/helm-python}
if [ -x "$VENV/bin/python" ] &&
    "$VENV/bin/python" -c "import helm_python, sys; sys.exit(helm_python.__version__ != '$VERSION')" 2>/dev/null; then
  exit 0
fi
t0=$SECONDS
echo "installing helm-python-sdk $VERSION into $VENV (once per machine)"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "helm-python-sdk==$VERSION"
"$VENV/bin/python" -c "import helm_python; print('helm', helm_python.helm_sdk_version())"
echo "installed helm-python-sdk in $((SECONDS - t0)) s"

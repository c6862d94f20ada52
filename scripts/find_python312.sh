#!/usr/bin/env bash
# Print the path of a Python 3.12 interpreter, or fail naming what was tried.
for cand in "${PYTHON:-}" python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12; do
  [ -n "$cand" ] || continue
  if p=$(command -v "$cand" 2>/dev/null) && "$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    echo "$p"; exit 0
  fi
done
echo "no Python 3.12 found (tried \$PYTHON, python3.12, pyenv versions, /usr/bin): install Python 3.12 or set PYTHON=/path/to/python3.12" >&2
exit 1

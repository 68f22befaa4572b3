#!/usr/bin/env bash
# Fails on any C++ source the repository tracks that clang-format (.clang-format) would change,
# naming each file; `scripts/check_format.sh --fix` rewrites them in place. CI runs the check
# (scripts/test.sh). X-macro lists (*.inc) and third-party-shaped generated files are not C++
# statements clang-format can lay out, so only .h / .cpp / .c files are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$fmt" ]; then
  echo "check_format: clang-format is not installed (scripts/setup.sh installs clang-format-14)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.c')
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$fmt" --dry-run --Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check_format: %d file(s) differ from clang-format (scripts/check_format.sh --fix):\n' ${#bad[@]} >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files follow .clang-format"

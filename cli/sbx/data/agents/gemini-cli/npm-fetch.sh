#!/bin/sh
# npm-fetch.sh: install an agent's official npm release without npm.
#
#   npm-fetch.sh (--from DIR | --registry URL) --into PREFIX [--pins FILE] [--set NAME=VALUE]... LIST
#
# LIST names one package per line as NAME@VERSION; `{name}` is replaced by the --set value of
# that name, and `{arch}` by this machine's npm cpu name (x64, arm64). FILE (default: LIST's
# directory's packages.lock) pins each package the kit may install, one `NAME@VERSION
# sha512-BASE64` a line, as its author recorded it: every tarball is checked against that pin,
# never against what the registry (or a proxy on the way) says, and a package without a pin is
# not installed. Each tarball comes from DIR (files `npm pack` wrote there) or from the registry
# (the version's `dist.tarball`), and is unpacked into PREFIX/node_modules/NAME, as npm lays
# packages out. With --registry, nothing is fetched when PREFIX/.installed already names
# exactly these packages (so a hook can run on every create).
# The same file sits in every agent kit (a kit is one self-contained directory).
set -eu

usage() { echo "usage: npm-fetch.sh (--from DIR | --registry URL) --into PREFIX [--pins FILE] [--set K=V]... LIST" >&2; exit 2; }
from="" registry="" into="" sets="" pins=""
while [ $# -gt 1 ]; do
  case $1 in
    --from) from=$2; shift 2 ;;
    --registry) registry=${2%/}; shift 2 ;;
    --into) into=$2; shift 2 ;;
    --pins) pins=$2; shift 2 ;;
    --set) sets="$sets $2"; shift 2 ;;
    *) usage ;;
  esac
done
[ $# -eq 1 ] && [ -n "$into" ] || usage
[ -n "$from" ] || [ -n "$registry" ] || usage
list=$1
[ -n "$pins" ] || pins=$(dirname "$list")/packages.lock
[ -f "$pins" ] || { echo "npm-fetch: no pins file $pins: every package must be pinned by its sha512" >&2; exit 1; }

case $(uname -m) in
  x86_64|amd64) arch=x64 ;;
  aarch64|arm64) arch=arm64 ;;
  *) echo "npm-fetch: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac

specs=""
while IFS= read -r line || [ -n "$line" ]; do
  case $line in ''|'#'*) continue ;; esac
  line=$(printf '%s' "$line" | sed "s/{arch}/$arch/g")
  for pair in $sets; do
    key=${pair%%=*} value=${pair#*=}
    case $value in *[!A-Za-z0-9._-]*) echo "npm-fetch: bad value for $key" >&2; exit 2 ;; esac
    line=$(printf '%s' "$line" | sed "s/{$key}/$value/g")
  done
  case $line in *'{'*) echo "npm-fetch: unset placeholder in $line" >&2; exit 2 ;; esac
  specs="$specs $line"
done < "$list"

mkdir -p "$into/node_modules"
if [ -n "$registry" ] && [ "$(cat "$into/.installed" 2>/dev/null)" = "$specs" ]; then
  echo "npm-fetch: already installed:$specs"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# npm pack's file name for NAME@VERSION: the scope's @ dropped and its / made a -.
pack_name() { printf '%s-%s.tgz' "$(printf '%s' "$1" | sed 's/^@//; s#/#-#')" "$2"; }

for spec in $specs; do
  name=${spec%@*} version=${spec##*@}
  file=$(pack_name "$name" "$version")
  # The kit's own pin: exactly one `sha512-` line for exactly this NAME@VERSION.
  pinned=$(awk -v s="$spec" '$1 == s {n++; pin=$2} END {if (n == 1) print pin}' "$pins")
  case $pinned in
    sha512-*) ;;
    *) echo "npm-fetch: $spec is not pinned in $pins (one line: $spec sha512-...); not installing it" >&2; exit 1 ;;
  esac
  sum=$(printf '%s' "${pinned#sha512-}" | base64 -d 2>/dev/null | od -An -v -tx1 | tr -d ' \n')
  [ ${#sum} -eq 128 ] || { echo "npm-fetch: the pin of $spec in $pins is not a sha512" >&2; exit 1; }
  if [ -n "$from" ]; then
    [ -f "$from/$file" ] || { echo "npm-fetch: $file is not staged in $from (scripts/stage_agents.py)" >&2; exit 1; }
    cp "$from/$file" "$work/pkg.tgz"
  else
    # Only where the tarball is comes from the registry; what it must hash to is the pin.
    escaped=$(printf '%s' "$name" | sed 's#/#%2f#')
    curl -fsSL --retry 2 -o "$work/meta.json" "$registry/$escaped/$version"
    url=$(jq -r '.dist.tarball' "$work/meta.json")
    echo "npm-fetch: downloading $spec"
    curl -fsSL --retry 2 -o "$work/pkg.tgz" "$url"
  fi
  echo "$sum  $work/pkg.tgz" | sha512sum -c --quiet - 2>/dev/null \
    || { echo "npm-fetch: $spec does not match the sha512 its kit pins ($pins): the tarball was substituted or damaged on the way; not installing it" >&2; exit 1; }
  # A package is one top directory (`package/`); nothing may point outside it.
  if tar -tzf "$work/pkg.tgz" | grep -Eq '^/|(^|/)\.\.(/|$)' \
      || tar -tvzf "$work/pkg.tgz" | grep -Eq '^[^-d]'; then
    echo "npm-fetch: $spec holds a link, a device or a path outside its directory" >&2; exit 1
  fi
  target="$into/node_modules/$name"
  rm -rf "$target" && mkdir -p "$target"
  tar -xzf "$work/pkg.tgz" -C "$target" --strip-components=1 --no-same-owner --no-same-permissions \
    --no-overwrite-dir
  chmod -R a+rX,go-w "$target"
  echo "npm-fetch: installed $spec"
done
printf '%s' "$specs" > "$into/.installed"

#!/usr/bin/env bash
# Installs hxcomm (issue 8): the CLI, the C header and library with a pkg-config file, and the
# libfabric provider.
#
#   scripts/install.sh [--prefix DIR] [--libdir DIR] [--fabric-provider-dir DIR] [--destdir DIR]
#                      [--no-build]
#   scripts/install.sh --uninstall [--prefix DIR] [--destdir DIR]
#
#   <prefix>/bin/hxcomm                     the CLI (hxcomm run, net, bench, demo)
#   <prefix>/include/hxcomm.h               the C API
#   <libdir>/libhxcomm.so                   the C library (libdir defaults to <prefix>/lib)
#   <libdir>/pkgconfig/hxcomm.pc            cc app.c $(pkg-config --cflags --libs hxcomm)
#   <provider dir>/libhxcomm-fi.so          the libfabric provider `hxcomm`; the directory
#                                           defaults to <libdir>/libfabric, where libfabric
#                                           finds it only with FI_PROVIDER_PATH (printed at the
#                                           end); --fabric-provider-dir with libfabric's own
#                                           directory (/usr/lib/x86_64-linux-gnu/libfabric on
#                                           Debian) needs no setting
#   <prefix>/share/hxcomm/install-manifest  what was installed, for --uninstall
#
# --libdir and --fabric-provider-dir may be relative to the prefix. --destdir stages the files
# under DIR for packaging; the paths written into them (hxcomm.pc, the manifest) are the final
# ones. Without --no-build it runs `cargo build --release --workspace` first; either way it
# installs what is in target/release (or $CARGO_TARGET_DIR/release).
# --uninstall removes exactly the files the manifest lists, then the directories the install
# created, when they are empty.
#
# libhxcomm.so has no SONAME and no versioned name: programs record `libhxcomm.so` itself. A
# SONAME such as libhxcomm.so.0 would make every program linked in the build tree look for a
# file cargo does not produce (target/release has only libhxcomm.so).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
prog=scripts/install.sh

usage() {
  cat <<'USAGE'
usage: scripts/install.sh [--prefix DIR] [--libdir DIR] [--fabric-provider-dir DIR]
                          [--destdir DIR] [--no-build]
       scripts/install.sh --uninstall [--prefix DIR] [--destdir DIR]
Defaults: --prefix /usr/local, --libdir <prefix>/lib, --fabric-provider-dir <libdir>/libfabric
USAGE
}
die() { echo "$prog: $*" >&2; exit 1; }

prefix=/usr/local
libdir=
providerdir=
destdir=
build=1
uninstall=0
while [ $# -gt 0 ]; do
  case $1 in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;; # --opt=value as --opt value
  esac
  case $1 in
    --prefix|--libdir|--fabric-provider-dir|--destdir)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a directory"
      case $1 in
        --prefix) prefix=$2 ;;
        --libdir) libdir=$2 ;;
        --fabric-provider-dir) providerdir=$2 ;;
        --destdir) destdir=$2 ;;
      esac
      shift 2 ;;
    --no-build) build=0; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

# Absolute, without a trailing slash, without . or .. components: the manifest and hxcomm.pc hold
# these paths, and --uninstall accepts only such paths.
normalize() {
  local out='' part
  local -a parts
  IFS=/ read -r -a parts <<<"$1"
  for part in "${parts[@]}"; do
    case $part in
      ''|.) ;;
      ..) out=${out%/*} ;;
      *) out=$out/$part ;;
    esac
  done
  echo "${out:-/}"
}
case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
prefix=$(normalize "$prefix")
[ -n "$libdir" ] || libdir=lib
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
libdir=$(normalize "$libdir")
[ -n "$providerdir" ] || providerdir=$libdir/libfabric
case $providerdir in /*) ;; *) providerdir=$prefix/$providerdir ;; esac
providerdir=$(normalize "$providerdir")
if [ -n "$destdir" ]; then
  case $destdir in /*) ;; *) destdir=$PWD/$destdir ;; esac
  destdir=$(normalize "$destdir")
  [ "$destdir" != / ] || destdir=
fi
manifest=$prefix/share/hxcomm/install-manifest

# A library added to or removed from a directory the dynamic loader knows through its cache
# (/usr/local/lib on Debian) needs the cache rebuilt: done for a real install as root only.
in_loader_cache() {
  local d want
  command -v ldconfig >/dev/null || return 1
  want=$(readlink -m "$1")
  while read -r d; do
    [ "$(readlink -m "$d")" = "$want" ] && return 0
  done < <(ldconfig -v -N -X 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p')
  return 1
}
maybe_ldconfig() {
  if [ -z "$destdir" ] && [ "$(id -u)" = 0 ] && in_loader_cache "$1"; then
    ldconfig
  fi
}

# ---- uninstall ---------------------------------------------------------------------------------
if [ $uninstall = 1 ]; then
  m=$destdir$manifest
  [ -f "$m" ] || die "no install manifest at $m (installed with --prefix $prefix${destdir:+ --destdir $destdir}?)"
  files=() dirs=()
  while IFS= read -r line; do
    case $line in ''|\#*) continue ;; esac
    path=${line#[fd] }
    [ "$(normalize "$path")" = "$path" ] && [ "$path" != / ] ||
      die "refusing manifest entry in $m: $line"
    case $line in
      "f /"*) [ "$path" = "$manifest" ] || files+=("$path") ;;
      "d /"*) dirs+=("$path") ;;
      *) die "malformed line in $m: $line" ;;
    esac
  done <"$m"
  lib_removed=
  for f in "${files[@]}"; do
    if [ -L "$destdir$f" ] || [ -e "$destdir$f" ]; then
      [ -L "$destdir$f" ] || [ ! -d "$destdir$f" ] || die "$destdir$f is a directory, not what was installed"
      rm -f -- "$destdir$f"
      echo "removed $destdir$f"
      case $f in */libhxcomm.so) lib_removed=$(dirname "$f") ;; esac
    else
      echo "already gone: $destdir$f"
    fi
  done
  rm -f -- "$m"
  echo "removed $m"
  # Deepest first; only directories the install created, and only when nothing else is in them.
  while IFS= read -r d; do
    [ -n "$d" ] && [ -d "$destdir$d" ] || continue
    if rmdir -- "$destdir$d" 2>/dev/null; then
      echo "removed $destdir$d/"
    else
      echo "kept $destdir$d/ (not empty)"
    fi
  done < <(for d in "${dirs[@]}"; do printf '%s\t%s\n' "${#d}" "$d"; done | sort -rn | cut -f2-)
  [ -z "$lib_removed" ] || maybe_ldconfig "$lib_removed"
  exit 0
fi

# ---- build -------------------------------------------------------------------------------------
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac
out=$target/release
if [ $build = 1 ]; then
  (cd "$root" && "${CARGO:-cargo}" build --release --workspace) || die "cargo build failed"
fi
for f in hxcomm libhxcomm.so libhxcomm_fi.so; do
  [ -f "$out/$f" ] ||
    die "$out/$f is missing: build with \`cargo build --release --workspace\` (or drop --no-build)"
done
[ -f "$root/include/hxcomm.h" ] || die "$root/include/hxcomm.h is missing"

# The version every crate shares ([workspace.package] in Cargo.toml).
version=$(awk '
  /^\[/ { sec = $0; next }
  sec == "[workspace.package]" && $1 == "version" { gsub(/[" ]/, "", $3); print $3; exit }
' "$root/Cargo.toml")
[ -n "$version" ] || die "no [workspace.package] version in $root/Cargo.toml"

# ---- install -----------------------------------------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The staging directory itself is the packager's, not part of the install.
[ -z "$destdir" ] || mkdir -p -- "$destdir"

# The manifest keeps what an earlier install into this prefix listed, so that --uninstall
# removes that too.
declare -A seen=()
entries=()
record() { if [ -z "${seen[$1]:-}" ]; then seen[$1]=1; entries+=("$1"); fi; }
if [ -f "$destdir$manifest" ]; then
  while IFS= read -r line; do
    case $line in "f /"*|"d /"*) record "$line" ;; esac
  done <"$destdir$manifest"
fi

# Creates a directory and its missing parents, recording the ones it created.
makedir() {
  local d=$1 missing=()
  while [ ! -d "$destdir$d" ] && [ "$d" != / ]; do
    [ ! -e "$destdir$d" ] || die "$destdir$d exists and is not a directory"
    missing=("$d" "${missing[@]}")
    d=$(dirname "$d")
  done
  for d in "${missing[@]}"; do
    mkdir -- "$destdir$d"
    # The prefix itself and whatever lies above it are not ours to remove later.
    case $d in "$prefix"/*|"$libdir"|"$libdir"/*|"$providerdir") record "d $d" ;; esac
  done
}

installed=()
put() { # put MODE SRC DEST
  makedir "$(dirname "$3")"
  [ -L "$destdir$3" ] || [ ! -d "$destdir$3" ] || die "$destdir$3 is a directory"
  install -m "$1" -- "$2" "$destdir$3"
  record "f $3"
  installed+=("$3")
}

put 0755 "$out/hxcomm" "$prefix/bin/hxcomm"
put 0644 "$root/include/hxcomm.h" "$prefix/include/hxcomm.h"
put 0755 "$out/libhxcomm.so" "$libdir/libhxcomm.so"
# libfabric dlopens every *fi.so in its provider directories; lib<name>-fi.so is its convention.
put 0755 "$out/libhxcomm_fi.so" "$providerdir/libhxcomm-fi.so"

# pkg-config: paths under the prefix are written relative to ${prefix}, so the file stays right
# when a packager moves the tree. No rpath: finding the library at run time is the loader's
# business (its cache, LD_LIBRARY_PATH, or the application's own -Wl,-rpath).
pcvar() {
  case $1 in
    "$prefix") echo "\${prefix}" ;;
    "$prefix"/*) echo "\${prefix}${1#"$prefix"}" ;;
    *) echo "$1" ;;
  esac
}
cat >"$tmp/hxcomm.pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=$(pcvar "$libdir")
includedir=\${prefix}/include
fabric_providerdir=$(pcvar "$providerdir")

Name: hxcomm
Description: Multi-rail communication layer for clusters of commodity machines (C API)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lhxcomm
EOF
put 0644 "$tmp/hxcomm.pc" "$libdir/pkgconfig/hxcomm.pc"

makedir "$(dirname "$manifest")"
record "f $manifest"
{
  echo "# hxcomm $version, installed by $prog; removed by $prog --uninstall --prefix $prefix"
  echo "# f: a file installed; d: a directory the install created (removed if empty)"
  printf '%s\n' "${entries[@]}"
} >"$tmp/install-manifest"
install -m 0644 -- "$tmp/install-manifest" "$destdir$manifest"
maybe_ldconfig "$libdir"

# ---- report ------------------------------------------------------------------------------------
echo "hxcomm $version installed${destdir:+ under $destdir}:"
for f in "${installed[@]}" "$manifest"; do echo "  $f"; done

# libfabric's compiled-in provider directory, as its fi_info reports it.
fabric_default=
if command -v fi_info >/dev/null; then
  fabric_default=$(fi_info -e 2>/dev/null |
    sed -n '/^# FI_PROVIDER_PATH/,/^$/s/.*(default: \([^)]*\)).*/\1/p' | head -n 1) || true
fi
echo
if [ -n "$fabric_default" ] && [ "$(readlink -m "$providerdir")" = "$(readlink -m "$fabric_default")" ]; then
  echo "The provider is in libfabric's own provider directory: \`fi_info -p hxcomm\` lists it."
else
  echo "libfabric finds the provider with this setting (with Open MPI, also mpirun -x FI_PROVIDER_PATH):"
  echo "  export FI_PROVIDER_PATH=$providerdir"
  if [ -n "$fabric_default" ]; then
    echo "It replaces libfabric's default provider directory, $fabric_default; or install"
    echo "with --fabric-provider-dir $fabric_default to need no setting."
  fi
fi
if [ -z "$destdir" ] && ! in_loader_cache "$libdir"; then
  case $libdir in
    /usr/lib|/lib|/usr/lib64|/lib64) ;;
    *)
      echo
      echo "$libdir is not on the dynamic loader's search path: programs linked with -lhxcomm"
      echo "run with LD_LIBRARY_PATH=$libdir (or are linked with -Wl,-rpath,$libdir)."
      ;;
  esac
fi
echo
echo "A C program: cc app.c \$(pkg-config --cflags --libs hxcomm)"
pc_default=
if command -v pkg-config >/dev/null; then
  pc_default=$(pkg-config --variable pc_path pkg-config 2>/dev/null) || true
fi
case ":$pc_default:" in
  *":$libdir/pkgconfig:"*) ;;
  *) echo "(with PKG_CONFIG_PATH=$libdir/pkgconfig: pkg-config does not look there by itself)" ;;
esac

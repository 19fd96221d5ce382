#!/usr/bin/env bash
# Usage: debian_unpack.sh PREFIX SUITE NAME PACKAGE[=VERSION]...
# Downloads the named packages from Debian's archive (suite SUITE, e.g. sid) with apt-get download through a
# private apt state, unpacks each with dpkg -x under PREFIX and records "package=version" lines in
# PREFIX/VERSIONS. Nothing is installed into the system and the system's apt sources are not changed. A pinned
# version that the archive no longer has falls back to the suite's current one. Best effort and quiet: on any
# failure it says so on stderr (prefixed with NAME) and exits 0. Used by fetch_hip_lib_headers.sh and
# fetch_rocm_sysroot.sh.
set -u
prefix="$1" suite="$2" name="$3"
shift 3
command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 || {
  echo "$name: needs apt-get and dpkg" >&2
  exit 0
}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "$name: no $keyring" >&2; exit 0; }
apt_dir="$(mktemp -d)"
trap 'rm -rf "$apt_dir"' EXIT
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite main" >"$apt_dir/sources.list"
opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::Cache=$apt_dir/cache" -o "APT::Sandbox::User=root" -qq)
if ! apt-get "${opts[@]}" update >/dev/null 2>&1; then
  echo "$name: apt-get update of Debian $suite failed; nothing fetched" >&2
  exit 0
fi
cd "$apt_dir/debs" || exit 0
for pin in "$@"; do
  apt-get "${opts[@]}" download "$pin" >/dev/null 2>&1 || apt-get "${opts[@]}" download "${pin%%=*}" >/dev/null 2>&1 ||
    echo "$name: ${pin%%=*} not found in Debian $suite" >&2
done
ls ./*.deb >/dev/null 2>&1 || exit 0
mkdir -p "$prefix" || exit 0
for deb in ./*.deb; do dpkg -x "$deb" "$prefix" || echo "$name: cannot unpack $deb" >&2; done
for deb in ./*.deb; do dpkg-deb -f "$deb" Package Version | paste -sd' '; done | sed 's/ Version: /=/; s/^Package: //' >"$prefix/VERSIONS"
exit 0

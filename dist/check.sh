#!/usr/bin/env bash
# Checks what dist/release.sh built into OUT (default target/dist/out) the way a user gets it:
#  1. SHA256SUMS matches both files;
#  2. the Debian package: its fields (Depends computed from the binary), its files, installed
#     with dpkg into an empty root; hvprof demo run from the installed files, its man page
#     rendered, its bash completion sourced;
#  3. the tarball: unpacked, its binary static (no interpreter, no shared library), hvprof demo,
#     report, merge, compare and top run by it under its seccomp filters (musl's system calls),
#     then demo and profile as an unprivileged user in /dev/kvm's group (.ci/unprivileged.sh);
#  4. the container image (dist/Containerfile) built from the tarball's binary and run with
#     /dev/kvm and no capability, when podman is installed.
# Run as root (dpkg --root, the unprivileged user, podman).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-target/dist/out}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
    echo "check: $*" >&2
    exit 1
}
step() { echo "check: $*"; }

(cd "$out" && sha256sum --check --quiet SHA256SUMS) || fail "SHA256SUMS does not match $out"
deb=$(echo "$out"/hvprof_*_amd64.deb)
tarball=$(echo "$out"/hvprof-*-x86_64-linux-musl.tar.gz)
[ -f "$deb" ] && [ -f "$tarball" ] || fail "no package or no tarball in $out"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo "${HVPROF_COMMIT:-}")

# A profile.json and its companions where hvprof demo was told to write them.
demo_ok() {
    for f in profile.json profile.pb.gz flamegraph.svg report.txt; do
        [ -s "$1/$f" ] || fail "$2: hvprof demo wrote no $f"
    done
}

step "the package: $deb"
depends=$(dpkg-deb --field "$deb" Depends)
[[ $depends == *libc6* ]] || fail "Depends is '$depends': not computed from the binary"
contents=$(dpkg-deb --contents "$deb" | awk '{print $NF}')
for f in usr/bin/hvprof usr/share/man/man1/hvprof.1.gz usr/share/man/man1/hvprof-profile.1.gz \
    usr/share/bash-completion/completions/hvprof usr/share/zsh/vendor-completions/_hvprof \
    usr/share/fish/vendor_completions.d/hvprof.fish usr/share/doc/hvprof/copyright \
    usr/share/doc/hvprof/README.md usr/share/doc/hvprof/docs/regression.md; do
    grep -qx "\./$f" <<<"$contents" || fail "the package has no /$f"
done
root=$work/root
mkdir "$root"
# An empty root has no libc6 to satisfy Depends: the binary runs on the host's.
dpkg --root="$root" --log="$work/dpkg.log" --force-depends -i "$deb" >"$work/dpkg.out" 2>&1 ||
    { cat "$work/dpkg.out"; fail "dpkg could not install the package into $root"; }
status=$(dpkg --root="$root" --status hvprof | sed -n 's/^Status: //p')
[ "$status" = "install ok installed" ] || fail "dpkg says the package is '$status'"
installed=$root/usr/bin/hvprof
version=$("$installed" --version)
[ -z "$commit" ] || [[ $version == *"$commit"* ]] || fail "'$version' does not name $commit"
"$installed" demo --out "$work/deb-demo" >"$work/deb-demo.log" 2>&1 ||
    { cat "$work/deb-demo.log"; fail "the installed hvprof demo failed"; }
demo_ok "$work/deb-demo" "the package"
MANWIDTH=80 man -l "$root/usr/share/man/man1/hvprof-profile.1.gz" 2>&1 | grep -q "hvprof-profile" ||
    fail "man -l hvprof-profile.1.gz does not render"
bash -c 'source "$1" && complete -p hvprof' _ "$root/usr/share/bash-completion/completions/hvprof" |
    grep -q "hvprof$" || fail "the bash completion does not complete hvprof"
step "installed into $root: $version; demo, man page and completion work"

step "the tarball: $tarball"
tar -xzf "$tarball" -C "$work"
dir=$(echo "$work"/hvprof-*-x86_64-linux-musl)
static=$dir/hvprof
for f in README.md LICENSE man/man1/hvprof.1.gz completions/hvprof.bash; do
    [ -f "$dir/$f" ] || fail "the tarball has no $f"
done
if readelf -lW "$static" | grep -q "Requesting program interpreter" ||
    readelf -dW "$static" | grep -q "(NEEDED)"; then
    fail "the tarball's hvprof is not static"
fi
[[ $("$static" --version) == "$version" ]] || fail "the static build's version differs: $("$static" --version)"
run_static() {
    local what=$1
    shift
    "$static" "$@" >"$work/$what.log" 2>&1 || { cat "$work/$what.log"; fail "the static hvprof $what failed"; }
}
run_static demo demo --out "$work/static-demo"
demo_ok "$work/static-demo" "the static build"
run_static demo-again demo --out "$work/static-demo-2"
run_static report report "$work/static-demo/profile.json" --out "$work/static-report"
[ -s "$work/static-report/report.txt" ] || fail "the static hvprof report wrote no report.txt"
run_static merge merge --out "$work/merged.json" "$work/static-demo/profile.json" "$work/deb-demo/profile.json"
rc=0
"$static" compare "$work/static-demo/profile.json" "$work/static-demo-2/profile.json" \
    --junit "$work/compare.xml" --markdown "$work/compare.md" >"$work/compare.log" 2>&1 || rc=$?
[ "$rc" -le 1 ] && [ -s "$work/compare.xml" ] || { cat "$work/compare.log"; fail "the static hvprof compare ended with $rc"; }
# top attached to a running VM, under its own filter.
"$static" profile --quiet --serial null --cmdline "scenario=shares shares.ms=4000" \
    --api-socket "$work/api.sock" --out "$work/static-live" >"$work/live.log" 2>&1 &
live=$!
for _ in $(seq 100); do [ -S "$work/api.sock" ] && break; sleep 0.1; done
"$static" top --api-socket "$work/api.sock" --batch --iterations 2 >"$work/top.log" 2>&1 ||
    { cat "$work/top.log"; fail "the static hvprof top failed"; }
grep -q "shares_f4" "$work/top.log" || { cat "$work/top.log"; fail "top named no shares_f4"; }
wait "$live" || { cat "$work/live.log"; fail "the static hvprof profile under top failed"; }
bash .ci/unprivileged.sh "$static"
step "the static build is static and runs demo, report, merge, compare and top"

if ! command -v podman >/dev/null; then
    step "no podman here: the container image was not built"
    exit 0
fi
step "the container image (dist/Containerfile)"
# This host's sandbox refuses crun (hybrid cgroups) and raising rlimits: runc, cgroupfs and
# limits below the current ones. A host with cgroup v2 needs none of these options.
podman=(podman --runtime runc --cgroup-manager cgroupfs)
limits=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
image=localhost/hvprof-check:$$
cp "$static" "$work/image/" 2>/dev/null || { mkdir "$work/image" && cp "$static" "$work/image/"; }
"${podman[@]}" build --quiet -f dist/Containerfile -t "$image" "$work/image" >/dev/null
mkdir -m 777 "$work/container-out"
rc=0
"${podman[@]}" run --rm "${limits[@]}" --device /dev/kvm --cap-drop all \
    --security-opt no-new-privileges -v "$work/container-out:/out" "$image" demo --out /out/demo \
    >"$work/container.log" 2>&1 || rc=$?
"${podman[@]}" rmi --force "$image" >/dev/null 2>&1 || true
[ "$rc" -eq 0 ] || { cat "$work/container.log"; fail "hvprof demo in the container failed ($rc)"; }
demo_ok "$work/container-out/demo" "the container"
step "the container ran hvprof demo with /dev/kvm and no capability"
echo "check: all passed"

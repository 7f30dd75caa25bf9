# Sourced by the provider probes (provider_lane.sh, provider_segments.sh): takes the bench and
# cargo locks for the whole probe, copies the tree at HEAD into a worktree under a new $out,
# applies the probe's patch (`probe_build PATCH.py`), builds the provider into $out/provider
# and bench/mpi_osu.c into $out/osu. The worktree is removed on exit.
probe_build() {
  exec 9>/tmp/hxcomm-bench.lock
  flock 9
  exec 8>/tmp/hxcomm-cargo.lock
  flock 8
  out=$(mktemp -d "/tmp/$(basename "$1" .py).XXXXXX")
  git worktree add -q --detach "$out/tree" HEAD
  trap 'git worktree remove --force "$out/tree" >/dev/null 2>&1 || true' EXIT
  python3 "$1" "$out/tree"
  (cd "$out/tree" && CARGO_TARGET_DIR="$out/target" cargo build --release -p hx-ofi -q)
  mkdir -p "$out/provider" && cp "$out/target/release/libhxcomm_fi.so" "$out/provider/"
  echo "probe provider: $out/provider"
  mpicc.openmpi -O2 -o "$out/osu" bench/mpi_osu.c
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

# Sourced by bench scripts that run Open MPI on a testbed.
# testbed_mgmt NAME [HXCOMM]: testbed NAME's management network (CIDR, from `hxcomm net status
# --json`), for Open MPI's oob_tcp_if_include (its own traffic stays off the rails).
testbed_mgmt() {
  "${2:-target/release/hxcomm}" net status --name "$1" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["mgmt_net"])'
}

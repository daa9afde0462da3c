# Sourced by scripts/discovery-test and benchmarks/discovery.sh: three network namespaces joined
# by veth pairs, with IPv4 (169.254/16) and IPv6 link-local addresses only.
#
#   A (ca0 169.254.10.1 fe80::a:1) -- (cb0 169.254.10.2 fe80::b:1) B (cb1 169.254.20.2 fe80::b:2) -- (cc0 169.254.20.3 fe80::c:1) C
#
# discovery_netns_up SUFFIX sets A, B and C to the namespace names; discovery_netns_down removes
# them and ends whatever still runs inside.

discovery_netns_up() {
    A="circle-a-$1"; B="circle-b-$1"; C="circle-c-$1"
    for ns in "$A" "$B" "$C"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
    done
    ip link add ca0 netns "$A" type veth peer name cb0 netns "$B"
    ip link add cb1 netns "$B" type veth peer name cc0 netns "$C"
    discovery_netns_configure "$A" ca0 169.254.10.1/24 fe80::a:1/64
    discovery_netns_configure "$B" cb0 169.254.10.2/24 fe80::b:1/64
    discovery_netns_configure "$B" cb1 169.254.20.2/24 fe80::b:2/64
    discovery_netns_configure "$C" cc0 169.254.20.3/24 fe80::c:1/64
}

discovery_netns_configure() { # namespace device ipv4/prefix ipv6/prefix
    ip -n "$1" link set "$2" addrgenmode none  # only the link-local address given here
    ip -n "$1" link set "$2" up
    ip -n "$1" addr add "$3" dev "$2" scope link
    ip -n "$1" -6 addr add "$4" dev "$2" nodad
}

discovery_netns_down() {
    for ns in "${A:-}" "${B:-}" "${C:-}"; do
        [[ -n "$ns" ]] || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns delete "$ns" 2>/dev/null || true
    done
}

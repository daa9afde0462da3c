#!/usr/bin/env python3
"""Peers for the discovery tests, run inside the test's network namespaces.

    echo HOST PORT                     UDP echo (HOST may be scoped: fe80::1%eth0); prints "ready"
    mcast-send GROUP PORT IFADDR TEXT  one datagram to a multicast group out of the interface with
                                       IPv4 address IFADDR (or, for IPv6, interface name IFADDR)
    zc-browse TYPE SECONDS             python-zeroconf browses TYPE; prints one JSON line per service
    zc-register NAME TYPE PORT K=V...  python-zeroconf registers a service; prints "ready", runs
                                       until stdin closes or SIGTERM, then unregisters (goodbye)
    mdns-count IFNAME SECONDS          listens to mDNS (both groups) on one interface; prints ready,
                                       then after SECONDS one JSON object: packets and UDP payload
                                       bytes per sender address
"""
import json
import signal
import socket
import sys
import time


def echo(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    info = socket.getaddrinfo(host, int(port), family, socket.SOCK_DGRAM, 0, socket.AI_NUMERICHOST)[0]
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind(info[4])
    print("ready", flush=True)
    while True:
        data, peer = sock.recvfrom(9000)
        sock.sendto(data, peer)


def mcast_send(group, port, ifaddr, text):
    if ":" in group:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        index = socket.if_nametoindex(ifaddr)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index)
        sock.sendto(text.encode(), (group, int(port), 0, index))
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ifaddr))
        sock.sendto(text.encode(), (group, int(port)))
    sock.close()


def describe(info):
    return {
        "name": info.name,
        "port": info.port,
        "server": info.server,
        "addresses": info.parsed_scoped_addresses(),
        "txt": {k.decode(): (v.decode() if v is not None else None) for k, v in info.properties.items()},
    }


def zc_browse(service_type, seconds):
    from zeroconf import ServiceBrowser, ServiceStateChange, Zeroconf

    zc = Zeroconf()
    seen = set()

    def on_change(zeroconf, service_type, name, state_change):
        if state_change is ServiceStateChange.Added and name not in seen:
            info = zeroconf.get_service_info(service_type, name, timeout=3000)
            if info is not None:
                seen.add(name)
                print(json.dumps(describe(info)), flush=True)

    ServiceBrowser(zc, service_type, handlers=[on_change])
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline and not seen:
        time.sleep(0.05)
    zc.close()


def zc_register(name, service_type, port, pairs):
    import ifaddr
    from zeroconf import ServiceInfo, Zeroconf

    properties = dict(pair.split("=", 1) for pair in pairs)
    addresses = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str) and not ip.ip.startswith("127."):
                addresses.append(socket.inet_aton(ip.ip))
            elif isinstance(ip.ip, tuple) and ip.ip[0] != "::1":
                addresses.append(socket.inet_pton(socket.AF_INET6, ip.ip[0]))
    host = socket.gethostname().split(".")[0] + "-py.local."
    info = ServiceInfo(service_type, f"{name}.{service_type}", port=int(port), properties=properties, server=host, addresses=addresses)
    zc = Zeroconf()
    zc.register_service(info)
    print("ready", flush=True)

    def stop(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        while sys.stdin.readline() != "":
            pass
    finally:
        zc.unregister_service(info)
        zc.close()


def mdns_count(ifname, seconds):
    import select

    index = socket.if_nametoindex(ifname)
    v4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    v4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    v4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    v4.bind(("0.0.0.0", 5353))
    mreqn = socket.inet_aton("224.0.0.251") + socket.inet_aton("0.0.0.0") + index.to_bytes(4, sys.byteorder)
    v4.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    v6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    v6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    v6.bind(("::", 5353))
    mreq6 = socket.inet_pton(socket.AF_INET6, "ff02::fb") + index.to_bytes(4, sys.byteorder)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq6)
    print("ready", flush=True)
    tally = {}
    deadline = time.monotonic() + float(seconds)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        readable, _, _ = select.select([v4, v6], [], [], left)
        for sock in readable:
            data, peer = sock.recvfrom(9000)
            entry = tally.setdefault(peer[0].split("%")[0], {"packets": 0, "bytes": 0})
            entry["packets"] += 1
            entry["bytes"] += len(data)
    print(json.dumps(tally), flush=True)


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    if command == "echo":
        echo(*arguments)
    elif command == "mcast-send":
        mcast_send(*arguments)
    elif command == "zc-browse":
        zc_browse(*arguments)
    elif command == "mdns-count":
        mdns_count(*arguments)
    elif command == "zc-register":
        zc_register(arguments[0], arguments[1], arguments[2], arguments[3:])
    else:
        sys.exit(f"unknown command {command}")

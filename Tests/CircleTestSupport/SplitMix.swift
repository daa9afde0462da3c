import CircleDiscovery

/// The deterministic random generator of the tests' seeded interleavings and mutations (a
/// failure replays from its seed): the one the mDNS state machines are seeded with.
public typealias SplitMix = SplitMix64

// CircleClient, the resilient chat SDK, is being built. What exists so far are its decision
// cores as values, tested with an injected clock: `ConnectionStateMachine` (connect,
// reconnect with full-jitter backoff, failover across servers, 1001/1000/4001 handling,
// token refresh) and `HeartbeatStateMachine` (ping interval and dead-connection timeout).
// The client that drives them over `CircleSocket` (outbox, acks, gapless resume) is not
// written yet; until then apps can speak `circle.v1` directly (docs/PROTOCOL.md).
@_exported import CircleSocket
@_exported import CircleWire

// CircleClient, the resilient chat SDK (reconnect, heartbeat, outbox, gapless resume), is not
// built yet; it is the subject of the next milestone. Until then, apps can speak `circle.v1`
// directly with `CircleSocket` and the message types of `CircleWire` (see docs/PROTOCOL.md).
@_exported import CircleSocket
@_exported import CircleWire

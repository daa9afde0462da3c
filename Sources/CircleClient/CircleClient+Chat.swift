import CircleWire
import Foundation

/// Edits, deletes, reactions, read markers and the circle list (docs/CLIENT.md, "Chat features").
///
/// Edits, deletes and reactions go through the outbox exactly like posts: made while
/// disconnected they are queued (persisted with a ``CircleClientConfiguration/stateFile``), sent
/// on the next connection with the same id, stored once by the server, and each call resolves
/// once with the change entry's ``PostReceipt`` (its own `seq` in the circle's stream) or a
/// ``CircleClientError`` (`no_such_post`, `post_deleted`, `not_author`, `invalid_emoji`,
/// `too_many_reactions`, `timed_out`, `cancelled`, …).
///
/// ```swift
/// let receipt = try await client.post("helo", to: "general")
/// try await client.edit(receipt.seq, in: "general", text: "hello")
/// try await client.react("👍", to: receipt.seq, in: "general")
/// try await client.post("agreed", to: "general", replyTo: receipt.seq)
/// try await client.markRead("general", upTo: receipt.seq)
/// ```
extension CircleClient {
    /// Replaces the text of one's own post `seq`.
    @discardableResult
    public func edit(_ seq: Int64, in circle: String, text: String) async throws -> PostReceipt {
        try await self.core.enqueue(OutboxEntry(id: ClientCore.newID(), circle: circle, action: .edit, text: text, target: seq, createdAt: ClientCore.nowMillis()))
    }

    /// Deletes post `seq` (one's own; any post of a private circle one owns). It stays in the
    /// stream as a tombstone (``CirclePost/deleted``).
    @discardableResult
    public func delete(_ seq: Int64, in circle: String) async throws -> PostReceipt {
        try await self.core.enqueue(OutboxEntry(id: ClientCore.newID(), circle: circle, action: .delete, target: seq, createdAt: ClientCore.nowMillis()))
    }

    /// Adds reaction `emoji` (exactly one emoji) to post `seq`. Reacting twice with the same
    /// emoji is stored but changes nothing.
    @discardableResult
    public func react(_ emoji: String, to seq: Int64, in circle: String) async throws -> PostReceipt {
        try await self.core.enqueue(OutboxEntry(id: ClientCore.newID(), circle: circle, action: .react, target: seq, emoji: emoji, createdAt: ClientCore.nowMillis()))
    }

    /// Takes back reaction `emoji` from post `seq`.
    @discardableResult
    public func unreact(_ emoji: String, from seq: Int64, in circle: String) async throws -> PostReceipt {
        try await self.core.enqueue(OutboxEntry(id: ClientCore.newID(), circle: circle, action: .unreact, target: seq, emoji: emoji, createdAt: ClientCore.nowMillis()))
    }

    /// Moves this user's read marker in `circle` forward to `seq` (the server clamps it to the
    /// circle's newest seq and never moves it back). The user's other connections get a
    /// ``CircleEvent/read(seq:)`` event. Joins the circle on this connection first if needed.
    ///
    /// Not queued: it needs a connection (`not_connected` otherwise).
    ///
    /// - Returns: the marker as the server stored it.
    @discardableResult
    public func markRead(_ circle: String, upTo seq: Int64) async throws -> Int64 {
        try await self.core.markRead(circle, upTo: seq)
    }

    /// The circles this user sees, each with its newest seq, the user's read marker and the
    /// unread count (the `circles` request over the connection; needs a connection).
    /// ``circles()`` gives the same list over HTTP without one.
    public func circleSummaries() async throws -> [CircleSummary] {
        try await self.core.circleSummaries()
    }

    /// Cancels an outbox entry that was never written to a connection (queued while
    /// disconnected, or restored from the state file and never sent). Its call throws
    /// ``CircleClientError/Code/cancelled`` and ``outboxEvents()`` reports it failed.
    ///
    /// - Returns: `false` when there is no such entry or it may have reached the server (it was
    ///   written to a connection, or is about to be, before a reconnect or a restart too).
    @discardableResult
    public func cancelOutboxEntry(_ id: String) async -> Bool {
        await self.core.cancelOutboxEntry(id)
    }

    /// Replaces the text of a post or edit in the outbox that was never sent (also in the state file).
    ///
    /// - Returns: `false` when there is no such entry, it has no text (a delete or a reaction),
    ///   or it may have reached the server (as for ``cancelOutboxEntry(_:)``).
    @discardableResult
    public func replaceOutboxText(_ id: String, with text: String) async -> Bool {
        await self.core.replaceOutboxText(id, with: text)
    }

    /// The offline cache of a circle: the posts received (with a state file), edits, deletes and
    /// reactions applied, oldest first, at most ``CircleClientConfiguration/cacheLimit``.
    /// Empty without a state file or with `cacheLimit` 0.
    public func cachedPosts(in circle: String) async -> [CirclePost] {
        await self.core.cachedPosts(in: circle)
    }

    /// The user name in the token's `sub` claim (read, not verified), once a token was fetched.
    public var user: String? {
        get async { await self.core.user }
    }
}

import Foundation
import Logging
import NIOCore
import PostgresNIO

/// How nodes sharing the database tell each other what changed.
///
/// Signals travel with `NOTIFY` on the channel ``signalChannel``, sent by ``notify(_:)`` in a
/// statement of their own after the posts' transaction has committed — never inside it:
/// PostgreSQL serialises the commits of every transaction that notified on one database-wide
/// lock (`PreCommit_Notify`), and a post's transaction holding its circles' row locks while
/// queueing for that lock would serialise all writers. Each node listens on a connection of its
/// own (``listen(connected:receive:)``), outside the pool. Notifications are lost while that
/// connection is down, so every (re)connection runs a poll, and the node polls
/// (``lastSeqs(of:)``, ``revocations(after:)``) at a fixed interval besides.
extension PostgresStore: SharedCircleStore {
    /// The `LISTEN`/`NOTIFY` channel of node signals.
    static let signalChannel = "circle_nodes"

    public func notify(_ notifications: [String]) async throws {
        guard !notifications.isEmpty else { return }
        try await self.operation("notify the other nodes") {
            for try await _ in try await self.client.execute(NotifyNodes(notifications: notifications), logger: self.logger) {}
        }
    }

    public func listen(connected: @escaping @Sendable () async -> Void, receive: @escaping @Sendable (String) -> Void) async {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                // Not under `withTimeout`: a connection it abandoned would never be closed. The
                // connection's own connect timeout bounds this.
                let connection = try await self.dedicatedConnection()
                do {
                    try await connection.listen(on: Self.signalChannel) { notifications in
                        self.logger.debug("listening for the other nodes' signals")
                        delay = .milliseconds(100)
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask {
                                await connected()
                                // A connection PostgreSQL dropped without closing would keep this
                                // node deaf: a query now and then proves it is alive.
                                while true {
                                    try await Task.sleep(for: .seconds(5))
                                    try await self.withTimeout("check the listening connection", limit: .seconds(5)) {
                                        _ = try await connection.query("SELECT 1", logger: self.logger)
                                    }
                                }
                            }
                            group.addTask {
                                for try await notification in notifications { receive(notification.payload) }
                            }
                            // Either ending (cancellation, a dropped connection) ends both.
                            try await group.next()
                            group.cancelAll()
                        }
                    }
                } catch {
                    if !Task.isCancelled {
                        self.logger.warning("lost the connection that hears the other nodes; reconnecting", metadata: ["error": "\(error)"])
                    }
                }
                try? await connection.close()
            } catch where !Task.isCancelled {
                self.logger.warning("cannot listen for the other nodes; retrying", metadata: ["error": "\(error)", "retry_in": "\(delay)"])
            } catch {}
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(5))
        }
    }

    public func lastSeqs(of circles: [String]) async throws -> [String: Int64] {
        try await self.operation("read the circles' newest posts") {
            var result: [String: Int64] = [:]
            let rows = try await self.client.query("SELECT name, last_seq FROM circles WHERE name = ANY(\(circles))", logger: self.logger)
            for try await (name, last) in rows.decode((String, Int64).self) { result[name] = last }
            return result
        }
    }

    public func revocations(after: Int64?) async throws -> (revoked: [(circle: String, user: String)], newest: Int64) {
        try await self.operation("read removed members") {
            guard let after else {
                var newest: Int64 = 0
                for try await id in try await self.client.query("SELECT coalesce(max(id), 0) FROM member_removals", logger: self.logger).decode(Int64.self) {
                    newest = id
                }
                return ([], newest)
            }
            var revoked: [(circle: String, user: String)] = []
            var newest = after
            let rows = try await self.client.query(
                "SELECT id, circle, user_name FROM member_removals WHERE id > \(after) ORDER BY id LIMIT 10000",
                logger: self.logger
            )
            for try await (id, circle, user) in rows.decode((Int64, String, String).self) {
                revoked.append((circle, user))
                newest = id
            }
            return (revoked, newest)
        }
    }

    /// A connection outside the pool, for `LISTEN`.
    func dedicatedConnection() async throws -> PostgresConnection {
        var configuration = PostgresConnection.Configuration(
            host: self.configuration.host,
            port: self.configuration.port,
            username: self.configuration.user,
            password: self.configuration.password,
            database: self.configuration.database,
            tls: try self.configuration.connectionTLS()
        )
        configuration.options.connectTimeout = .seconds(5)
        return try await PostgresConnection.connect(configuration: configuration, id: 0, logger: self.logger)
    }
}

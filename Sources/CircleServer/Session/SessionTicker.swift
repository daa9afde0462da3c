import NIOConcurrencyHelpers
import NIOCore

/// One repeating timer per event loop (and check interval) that drives the idle and token-expiry
/// checks of every session on that loop, instead of a repeating timer per connection: a NIO
/// `RepeatedTask` with its scheduled task costs about 600 bytes, a slot here about 40
/// (benchmarks/idle.py). The timer runs only while the loop has sessions.
///
/// A session whose token expires before the next tick gets a one-shot timer for that moment
/// from the tick before, so expiry stays as exact as with a timer per connection.
final class SessionTicker: @unchecked Sendable {
    // @unchecked: `sessions` and `task` are read and written only on `eventLoop` (each method
    // asserts it); the shared table of tickers is behind its own lock.

    /// What a ticker calls on each of its sessions, on their event loop.
    protocol Session: AnyObject {
        /// Runs the periodic checks; `nextTick` is when the following call will come.
        func tick(nextTick: NIODeadline)
    }

    private struct Key: Hashable {
        var eventLoop: ObjectIdentifier
        var interval: Int64
    }

    private static let tickers = NIOLockedValueBox<[Key: SessionTicker]>([:])

    let eventLoop: any EventLoop
    let interval: TimeAmount
    private let key: Key
    private var sessions: [ObjectIdentifier: any Session] = [:]
    private var task: RepeatedTask?

    private init(eventLoop: any EventLoop, interval: TimeAmount, key: Key) {
        self.eventLoop = eventLoop
        self.interval = interval
        self.key = key
    }

    /// Adds a session to the ticker of `eventLoop` for checks every `interval` (on that loop),
    /// making the ticker if the loop has none yet; the session's first tick comes within `interval`.
    static func add(_ session: any Session, on eventLoop: any EventLoop, interval: TimeAmount) -> SessionTicker {
        eventLoop.preconditionInEventLoop()
        let key = Key(eventLoop: ObjectIdentifier(eventLoop), interval: interval.nanoseconds)
        let ticker = self.tickers.withLockedValue { tickers in
            if let ticker = tickers[key] { return ticker }
            let ticker = SessionTicker(eventLoop: eventLoop, interval: interval, key: key)
            tickers[key] = ticker
            return ticker
        }
        ticker.sessions[ObjectIdentifier(session)] = session
        if ticker.task == nil {
            ticker.task = eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { [ticker] _ in
                ticker.tick()
            }
        }
        return ticker
    }

    /// Removes a session (on the loop); the timer stops with the last one, and the ticker leaves
    /// the table (the next session on this loop makes a new one). Safe against a concurrent
    /// ``add(_:on:interval:)``: only code on this loop adds to this ticker.
    func remove(_ session: any Session) {
        self.eventLoop.preconditionInEventLoop()
        self.sessions[ObjectIdentifier(session)] = nil
        if self.sessions.isEmpty {
            self.task?.cancel()
            self.task = nil
            let key = self.key
            Self.tickers.withLockedValue { tickers in
                if tickers[key] === self { tickers[key] = nil }
            }
        }
    }

    private func tick() {
        let nextTick = NIODeadline.now() + self.interval
        // A session may end (and leave) during its tick: walk a copy.
        for session in Array(self.sessions.values) {
            session.tick(nextTick: nextTick)
        }
    }
}

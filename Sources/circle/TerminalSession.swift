import CircleSocket
import Dispatch
import Foundation
import NIOConcurrencyHelpers

/// One interactive `circle ws` session on an open connection: prints what arrives, sends what is
/// typed, pings on a timer, closes on end of input, and decides the exit status.
///
/// Its parts run as children of one task group; the receiver's result (the connection ended) is
/// what the parent waits for. The other children then are cancelled.
final class TerminalSession: Sendable {
    struct Options: Sendable {
        /// Messages sent right after connecting (`--execute`).
        var execute: [String] = []
        /// How long to wait for replies before closing, after `--execute` or at end of input (`--wait`).
        var wait: Duration?
        /// Close once this many messages have been received (`--count`).
        var count: Int?
        /// Ping interval (`--ping`).
        var pingInterval: Duration?
        /// How long a ping may wait for its pong before the connection is dropped.
        var pingTimeout: Duration = .seconds(10)
    }

    private enum ChildResult: Sendable {
        /// The inbound messages ended: normally (`nil`) or with this error.
        case connectionEnded((any Error)?)
        case done
    }

    /// What the children tell each other; they run concurrently, so it lives in a locked box.
    private struct State {
        var closeStarted = false
        var pingFailure: String?
    }

    private let socket: WebSocket
    private let output: TerminalOutput
    private let options: Options
    private let state = NIOLockedValueBox(State())
    /// Finished by the receiver once `--count` messages have arrived.
    private let counted = AsyncStream.makeStream(of: Never.self)
    /// Ctrl-C, caught since before the "connected to" line (``Interrupts/trap()``).
    private let interrupts: Interrupts

    /// `interrupts` must be trapped before anything tells the user (or a script) that the
    /// session is up: a Ctrl-C sent right after "connected to" is then a close, not a kill.
    init(socket: WebSocket, output: TerminalOutput, options: Options, interrupts: Interrupts) {
        self.socket = socket
        self.output = output
        self.options = options
        self.interrupts = interrupts
    }

    /// SIGINT as a stream: the default action (ending the process) is off from ``trap()`` on.
    /// Unchecked: a dispatch source may be cancelled from any thread (Dispatch's own rule), and
    /// nothing else of it is touched after ``trap()``.
    final class Interrupts: @unchecked Sendable {
        let stream: AsyncStream<Void>
        let source: any DispatchSourceSignal

        private init(stream: AsyncStream<Void>, source: any DispatchSourceSignal) {
            self.stream = stream
            self.source = source
        }

        static func trap() -> Interrupts {
            let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
            let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
            source.setEventHandler { continuation.yield() }
            signal(SIGINT, SIG_IGN)
            source.resume()
            return Interrupts(stream: stream, source: source)
        }
    }

    /// Runs until the connection has ended and returns the process exit status.
    func run() async -> Int32 {
        await withTaskGroup(of: ChildResult.self) { group in
            group.addTask { await self.receive() }
            group.addTask {
                await self.drive()
                return .done
            }
            group.addTask {
                await self.handleInterrupts()
                return .done
            }
            if self.options.count != nil {
                group.addTask {
                    for await _ in self.counted.stream {}
                    guard !Task.isCancelled else { return .done }
                    await self.close(code: .normalClosure, reason: "")
                    return .done
                }
            }
            if let interval = self.options.pingInterval {
                group.addTask {
                    await self.pingPeriodically(every: interval)
                    return .done
                }
            }
            while let result = await group.next() {
                if case .connectionEnded(let error) = result {
                    group.cancelAll()
                    return await self.exitStatus(after: error)
                }
            }
            preconditionFailure("the receiver always reports how the connection ended")
        }
    }

    // MARK: Children

    private func receive() async -> ChildResult {
        defer { self.counted.continuation.finish() }
        var received = 0
        do {
            for try await message in self.socket.messages {
                self.output.received(message)
                received += 1
                if received == self.options.count { self.counted.continuation.finish() }
            }
            return .connectionEnded(nil)
        } catch {
            return .connectionEnded(error)
        }
    }

    /// Sends the `--execute` messages, then either closes after `--wait` or forwards standard input.
    private func drive() async {
        for text in self.options.execute {
            guard await self.send(.text(text)) else { return }
        }
        if !self.options.execute.isEmpty, let wait = self.options.wait {
            // Like wscat -x -w: standard input is not read (a background job must not stop on SIGTTIN).
            guard (try? await Task.sleep(for: wait)) != nil else { return }
            await self.close(code: .normalClosure, reason: "")
            return
        }
        for await line in TerminalInput.start() {
            switch TerminalCommand(line: line) {
            case .send(let text):
                guard await self.send(.text(text)) else { return }
            case .sendBinary(let bytes):
                guard await self.send(.binary(bytes)) else { return }
            case .ping:
                await self.pingOnce()
            case .close(let code, let reason):
                await self.close(code: code, reason: reason)
                return
            case .quit:
                await self.close(code: .normalClosure, reason: "")
                return
            case .help:
                self.output.notice(TerminalCommand.summary)
            case .invalid(let message):
                self.output.error(message)
            }
        }
        guard !Task.isCancelled else { return }
        // End of input.
        if let wait = self.options.wait {
            guard (try? await Task.sleep(for: wait)) != nil else { return }
        }
        await self.close(code: .normalClosure, reason: "")
    }

    private func pingPeriodically(every interval: Duration) async {
        while (try? await Task.sleep(for: interval)) != nil {
            do {
                let roundTrip = try await self.socket.ping(timeout: self.options.pingTimeout)
                self.output.status("< pong \(TerminalOutput.milliseconds(roundTrip))")
            } catch let error as WebSocketError where error.code == .pingTimeout {
                self.state.withLockedValue { $0.pingFailure = error.message }
                self.socket.abort()
                return
            } catch {
                return  // the connection has ended; the receiver reports how
            }
        }
    }

    /// The first Ctrl-C closes with 1000 like end of input; a second one exits at once with 130.
    private func handleInterrupts() async {
        await withDiscardingTaskGroup { group in
            var count = 0
            for await _ in self.interrupts.stream {
                count += 1
                if count > 1 { exit(130) }
                self.output.status("closing (press Ctrl-C again to quit at once)")
                group.addTask { await self.close(code: .normalClosure, reason: "") }
            }
        }
        self.interrupts.source.cancel()
    }

    // MARK: Actions

    /// Sends a message; returns `false` once the connection no longer takes messages.
    private func send(_ message: WebSocketMessage) async -> Bool {
        do {
            try await self.socket.send(message)
            return true
        } catch let error as WebSocketError where error.code == .notOpen {
            return false  // closing or closed: the receiver reports how it ended
        } catch {
            self.output.error("not sent: \(error)")
            return true
        }
    }

    private func pingOnce() async {
        do {
            let roundTrip = try await self.socket.ping(timeout: self.options.pingTimeout)
            self.output.notice("< pong \(TerminalOutput.milliseconds(roundTrip))")
        } catch {
            self.output.error("ping failed: \(error)")
        }
    }

    /// Starts the close handshake (once) and waits until the connection has ended.
    private func close(code: WebSocketCloseCode, reason: String) async {
        let first = self.state.withLockedValue { state in
            defer { state.closeStarted = true }
            return !state.closeStarted
        }
        guard first else { return }
        await self.socket.close(code: code, reason: reason)
    }

    // MARK: Outcome

    private func exitStatus(after error: (any Error)?) async -> Int32 {
        if let pingFailure = self.state.withLockedValue({ $0.pingFailure }) {
            self.output.error("connection lost: \(pingFailure); dropped the connection")
            return ExitStatus.connectionLost
        }
        if let error {
            self.output.error("\(error)")
            return ExitStatus.connectionLost
        }
        let info = await self.socket.closeInfo
        let codeAndReason = "\(info.code.rawValue)" + (info.reason.isEmpty ? "" : " \(info.reason)")
        if info.initiatedByPeer {
            let line = "closed by server: \(codeAndReason)"
            if Self.isNormal(info.code) {
                self.output.status(line)
                return ExitStatus.success
            }
            self.output.notice(line)
            return ExitStatus.connectionLost
        }
        if info.wasClean {
            self.output.status("closed: \(codeAndReason)")
            return ExitStatus.success
        }
        self.output.error("the close handshake did not complete (\(info))")
        return ExitStatus.connectionLost
    }

    /// 1000 (normal), 1001 (going away) and 1005 (a close frame without a code) end a session well.
    static func isNormal(_ code: WebSocketCloseCode) -> Bool {
        code == .normalClosure || code == .goingAway || code == .noStatusReceived
    }
}

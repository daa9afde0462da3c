import Dispatch
import Foundation

/// The lines of standard input as an `AsyncSequence`, read on a dedicated thread.
///
/// The thread uses `read(2)` on the file descriptor rather than `readLine()`, so it never holds a
/// stdio lock that `exit` might need: the process can end while the thread is still blocked in a
/// read. Lines end at `\n` (a preceding `\r` is dropped too); a last line without a newline is
/// still delivered. At most `bufferLimit` lines are read ahead of the consumer.
struct TerminalInput: AsyncSequence, Sendable {
    typealias Element = String

    private let lines: AsyncStream<String>
    private let credits: DispatchSemaphore

    /// Starts reading `fileDescriptor` on a new thread.
    static func start(fileDescriptor: Int32 = STDIN_FILENO, bufferLimit: Int = 64) -> TerminalInput {
        let (lines, continuation) = AsyncStream.makeStream(of: String.self)
        let credits = DispatchSemaphore(value: bufferLimit)
        let thread = Thread {
            var pending: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            func deliver(_ line: ArraySlice<UInt8>) {
                var line = line
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                credits.wait()
                continuation.yield(String(decoding: line, as: UTF8.self))
            }
            while true {
                let count = chunk.withUnsafeMutableBytes { read(fileDescriptor, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                pending.append(contentsOf: chunk[0..<count])
                var start = pending.startIndex
                while let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                    deliver(pending[start..<newline])
                    start = newline + 1
                }
                pending.removeSubrange(..<start)
            }
            if !pending.isEmpty { deliver(pending[...]) }
            continuation.finish()
        }
        thread.name = "circle stdin"
        thread.start()
        return TerminalInput(lines: lines, credits: credits)
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: self.lines.makeAsyncIterator(), credits: self.credits)
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<String>.AsyncIterator
        let credits: DispatchSemaphore

        /// The next line; `nil` at end of input or when the task is cancelled.
        mutating func next() async -> String? {
            let line = await self.base.next()
            if line != nil { self.credits.signal() }
            return line
        }
    }
}

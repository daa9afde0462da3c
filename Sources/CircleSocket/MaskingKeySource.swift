#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOWebSocket

/// Where a client connection's masking keys come from: the kernel's random generator, 32 keys
/// per read.
///
/// RFC 6455 5.3 asks for a fresh, unpredictable key per frame from a strong source of entropy.
/// `WebSocketMaskingKey.random()` asks `SystemRandomNumberGenerator` for each one, which on Linux
/// is a `getrandom` system call per frame: a visible share of the client's CPU at 64 B in the
/// client benchmark (`perf`; docs/bench/client.md). Here one read of `/dev/urandom` (the same
/// generator as `getrandom`; Glibc's Swift module does not declare `getrandom` itself) gives 32
/// keys, or `arc4random_buf` on Apple platforms. Each key is used once.
package struct MaskingKeySource: RandomNumberGenerator {
    private static let batch = 32  // words of 64 bits: one key each
    private var words: [UInt64] = []

    package init() {}

    /// A key for one frame.
    package mutating func nextKey() -> WebSocketMaskingKey {
        WebSocketMaskingKey.random(using: &self)
    }

    package mutating func next() -> UInt64 {
        if self.words.isEmpty {
            self.words = Self.refill()
        }
        return self.words.removeLast()
    }

    private static func refill() -> [UInt64] {
        [UInt64](unsafeUninitializedCapacity: Self.batch) { words, count in
            if !fillFromKernel(UnsafeMutableRawBufferPointer(words)) {
                var system = SystemRandomNumberGenerator()
                for index in 0..<Self.batch { words[index] = system.next() }
            }
            count = Self.batch
        }
    }
}

#if canImport(Glibc) || canImport(Musl)
/// Opened once, on first use, and kept for the life of the process.
private let urandom: CInt = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
#endif

/// Fills `bytes` from the kernel's generator in one call; false if it could not.
private func fillFromKernel(_ bytes: UnsafeMutableRawBufferPointer) -> Bool {
    guard let base = bytes.baseAddress else { return true }
    #if canImport(Darwin)
    arc4random_buf(base, bytes.count)
    return true
    #elseif canImport(Glibc) || canImport(Musl)
    guard urandom >= 0 else { return false }
    var filled = 0
    while filled < bytes.count {
        let got = read(urandom, base + filled, bytes.count - filled)
        if got > 0 {
            filled += got
        } else if got < 0 && errno == EINTR {
            continue
        } else {
            return false
        }
    }
    return true
    #else
    return false
    #endif
}

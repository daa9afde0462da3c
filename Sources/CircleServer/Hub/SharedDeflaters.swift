import CircleSocket
import NIOConcurrencyHelpers
import NIOCore

/// One compressor per shared compression setting, reset after every message, for the hub's
/// fan-outs. `@unchecked Sendable`: the compressors are only touched under `lock`.
final class SharedDeflaters: @unchecked Sendable {
    private let lock = NIOLock()
    private var compressors: [PerMessageDeflate.SharedCompression: PerMessageDeflate] = [:]

    /// The payload deflated as a connection with `setting` would (RFC 7692, no context
    /// takeover), or `nil` when that fails (the subscribers then compress for themselves).
    func deflate(_ payload: ByteBuffer, setting: PerMessageDeflate.SharedCompression, allocator: ByteBufferAllocator) -> ByteBuffer? {
        self.lock.withLock {
            let compressor: PerMessageDeflate
            if let existing = self.compressors[setting] {
                compressor = existing
            } else {
                var parameters = PerMessageDeflateParameters()
                parameters.serverNoContextTakeover = true
                parameters.serverMaxWindowBits = setting.windowBits
                guard let made = try? PerMessageDeflate(
                    parameters: parameters,
                    isClient: false,
                    compressionLevel: setting.compressionLevel,
                    minimumCompressedSize: setting.minimumCompressedSize
                ) else { return nil }
                self.compressors[setting] = made
                compressor = made
            }
            do {
                return try compressor.compress(payload, allocator: allocator)
            } catch {
                // A failed stream is not reused; the next message starts a fresh one.
                self.compressors[setting] = nil
                return nil
            }
        }
    }
}

import CircleWire
import Crypto
import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The media bytes in the data directory: `media/<sha256 hex>` for stored media (each content
/// once) and `media/uploads/<upload id>` for uploads in progress, whose size is their offset.
///
/// Every call blocks, so it runs on the thread pool. The file calls are plain POSIX rather than
/// `NonBlockingFileIO`, whose file-opening API swift-nio has deprecated in favour of
/// `_NIOFileSystem` (underscored, so not yet a stable dependency).
struct MediaFiles: Sendable {
    let root: String
    let threadPool: NIOThreadPool

    init(dataDirectory: String, threadPool: NIOThreadPool = .singleton) {
        self.root = (dataDirectory as NSString).appendingPathComponent("media")
        self.threadPool = threadPool
    }

    var uploadsDirectory: String { (self.root as NSString).appendingPathComponent("uploads") }

    func mediaPath(_ id: String) -> String { (self.root as NSString).appendingPathComponent(id) }
    func uploadPath(_ id: String) -> String { (self.uploadsDirectory as NSString).appendingPathComponent(id) }

    /// Creates `media/` and `media/uploads/`.
    func prepare() throws {
        try FileManager.default.createDirectory(atPath: self.uploadsDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    /// Opens an upload's file for appending (creating it), returning the descriptor and the
    /// bytes it already holds. The descriptor holds an exclusive `flock` on the file until it is
    /// closed: nodes that share the data directory (docs/SCALING.md) never append to one upload
    /// at once; a second writer gets ``UploadBusy``.
    func openUpload(_ id: String) async throws -> (fd: Int32, size: Int64) {
        let path = self.uploadPath(id)
        return try await self.threadPool.runIfActive {
            let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw MediaFileError("open \(path)", errno) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let code = errno
                posixClose(fd)
                if code == EWOULDBLOCK { throw UploadBusy() }
                throw MediaFileError("lock \(path)", code)
            }
            var info = stat()
            guard fstat(fd, &info) == 0 else {
                let code = errno
                posixClose(fd)
                throw MediaFileError("stat \(path)", code)
            }
            return (fd, Int64(info.st_size))
        }
    }

    /// The bytes an upload holds (0 when its file does not exist).
    func uploadSize(_ id: String) async throws -> Int64 {
        let path = self.uploadPath(id)
        return try await self.threadPool.runIfActive {
            var info = stat()
            guard stat(path, &info) == 0 else { return 0 }
            return Int64(info.st_size)
        }
    }

    /// Appends `buffer` to `fd`, all of it.
    func write(_ buffer: ByteBuffer, to fd: Int32, eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        self.threadPool.runIfActive(eventLoop: eventLoop) {
            try buffer.withUnsafeReadableBytes { bytes in
                var done = 0
                while done < bytes.count {
                    let written = posixWrite(fd, bytes.baseAddress! + done, bytes.count - done)
                    if written < 0 {
                        if errno == EINTR { continue }
                        throw MediaFileError("write", errno)
                    }
                    done += written
                }
            }
        }
    }

    /// Reads up to `count` bytes at `offset`.
    func read(_ fd: Int32, offset: Int64, count: Int, allocator: ByteBufferAllocator, eventLoop: any EventLoop) -> EventLoopFuture<ByteBuffer> {
        self.threadPool.runIfActive(eventLoop: eventLoop) {
            var buffer = allocator.buffer(capacity: count)
            let read = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { bytes in
                while true {
                    let result = pread(fd, bytes.baseAddress!, count, off_t(offset))
                    if result < 0 && errno == EINTR { continue }
                    guard result >= 0 else { throw MediaFileError("read", errno) }
                    return result
                }
            }
            guard read > 0 else { throw MediaFileError("read: the file is shorter than recorded", 0) }
            return buffer
        }
    }

    /// Appends `buffer` to `fd`, all of it, on the thread pool.
    func write(_ buffer: ByteBuffer, to fd: Int32) async throws {
        try await self.write(buffer, to: fd, eventLoop: MultiThreadedEventLoopGroup.singleton.any()).get()
    }

    /// Reads up to `count` bytes at `offset`, on the thread pool.
    func read(_ fd: Int32, offset: Int64, count: Int, allocator: ByteBufferAllocator) async throws -> ByteBuffer {
        try await self.read(fd, offset: offset, count: count, allocator: allocator, eventLoop: MultiThreadedEventLoopGroup.singleton.any()).get()
    }

    /// Closes `fd` on the thread pool without waiting.
    func closeDetached(_ fd: Int32) {
        self.threadPool.submit { _ in posixClose(fd) }
    }

    func close(_ fd: Int32) async {
        _ = try? await self.threadPool.runIfActive { posixClose(fd) }
    }


    /// Opens stored media for reading.
    func openMedia(_ id: String) async throws -> Int32 {
        let path = self.mediaPath(id)
        return try await self.threadPool.runIfActive {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw MediaFileError("open \(path)", errno) }
            return fd
        }
    }

    /// The first bytes of an upload (for sniffing) and, unless `knownDigest` is given, the
    /// SHA-256 of the whole file, read back from disk.
    func inspectUpload(_ id: String, knownDigest: String?) async throws -> (prefix: [UInt8], digest: String, size: Int64) {
        let path = self.uploadPath(id)
        return try await self.threadPool.runIfActive {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw MediaFileError("open \(path)", errno) }
            defer { posixClose(fd) }
            var hasher = SHA256()
            var prefix: [UInt8] = []
            var size: Int64 = 0
            var chunk = [UInt8](repeating: 0, count: 1 << 20)
            while true {
                let count = chunk.withUnsafeMutableBytes { posixRead(fd, $0.baseAddress!, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count >= 0 else { throw MediaFileError("read \(path)", errno) }
                if count == 0 { break }
                if prefix.count < MediaType.sniffLength { prefix += chunk[0..<min(count, MediaType.sniffLength - prefix.count)] }
                if knownDigest == nil { hasher.update(data: chunk[0..<count]) }
                size += Int64(count)
                if knownDigest != nil && prefix.count >= MediaType.sniffLength {
                    // Only the prefix was needed; the size comes from stat.
                    var info = stat()
                    guard fstat(fd, &info) == 0 else { throw MediaFileError("stat \(path)", errno) }
                    size = Int64(info.st_size)
                    break
                }
            }
            return (prefix, knownDigest ?? hexString(hasher.finalize()), size)
        }
    }

    /// Makes a completed upload's file the media file `id`: moved there, or dropped when that
    /// content is stored already. The file is synced first, so recorded media is on disk.
    func promoteUpload(_ upload: String, to id: String) async throws {
        let from = self.uploadPath(upload)
        let to = self.mediaPath(id)
        try await self.threadPool.runIfActive {
            let fd = open(from, O_RDONLY | O_CLOEXEC)
            if fd >= 0 {
                _ = fsync(fd)
                posixClose(fd)
            }
            if access(to, F_OK) == 0 {
                _ = unlink(from)
            } else if rename(from, to) != 0 {
                throw MediaFileError("rename \(from) to \(to)", errno)
            }
        }
    }

    func removeUpload(_ id: String) async {
        let path = self.uploadPath(id)
        _ = try? await self.threadPool.runIfActive { _ = unlink(path) }
    }
}

// Named wrappers: inside `MediaFiles`, `read`, `write` and `close` are its own methods.
@inline(__always) private func posixWrite(_ fd: Int32, _ pointer: UnsafeRawPointer, _ count: Int) -> Int {
    write(fd, pointer, count)
}

@inline(__always) private func posixRead(_ fd: Int32, _ pointer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(fd, pointer, count)
}

@inline(__always) private func posixClose(_ fd: Int32) {
    _ = close(fd)
}

/// Another process (a node sharing the data directory) is writing the upload.
struct UploadBusy: Error {}

func hexString(_ digest: some Sequence<UInt8>) -> String {
    Hex.encode(digest)
}

struct MediaFileError: Error, CustomStringConvertible {
    var description: String
    init(_ operation: String, _ code: Int32) {
        self.description = code == 0 ? operation : "\(operation): \(String(cString: strerror(code)))"
    }
}

/// The content types media may have, and the magic bytes each must start with.
enum MediaType {
    static let sniffLength = 12
    /// Photos only: anything else (random bytes, a PDF, an empty file) is refused with 415, so
    /// that every stored medium shows as an image on the chat page.
    static let accepted = ["image/jpeg", "image/png", "image/gif", "image/webp"]

    /// The canonical form of a `Content-Type` header value (lower case, no parameters), if accepted.
    static func normalize(_ header: String?) -> String? {
        guard let header else { return nil }
        let bare = header.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        let canonical = bare == "image/jpg" ? "image/jpeg" : bare
        return Self.accepted.contains(canonical) ? canonical : nil
    }

    /// Whether bytes starting with `prefix` (at most ``sniffLength`` of them, fewer only when
    /// the file is that short) are of `contentType`.
    static func matches(_ prefix: [UInt8], _ contentType: String) -> Bool {
        func starts(_ magic: [UInt8], at offset: Int = 0) -> Bool {
            prefix.count >= offset + magic.count && Array(prefix[offset..<offset + magic.count]) == magic
        }
        switch contentType {
        case "image/jpeg": return starts([0xFF, 0xD8, 0xFF])
        case "image/png": return starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        case "image/gif": return starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8))
        case "image/webp": return starts(Array("RIFF".utf8)) && starts(Array("WEBP".utf8), at: 8)
        default: return false
        }
    }

    /// What the bytes look like, for error messages.
    static func sniff(_ prefix: [UInt8]) -> String {
        for type in Self.accepted where Self.matches(prefix, type) { return type }
        return prefix.isEmpty ? "empty" : "not an accepted image type"
    }
}

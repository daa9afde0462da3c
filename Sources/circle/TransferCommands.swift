import ArgumentParser
import CircleClient
import CircleServer
import Crypto
import Foundation

struct UploadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "upload",
        abstract: "Upload a photo and post it to a circle.",
        discussion: """
            Uploads FILE through a resumable upload (retried with backoff, continued from the \
            server's offset after a failure) and posts it with the caption. Prints "#SEQ MEDIA_ID" \
            on stdout. Progress goes to stderr: a bar on a terminal, a line per 10% otherwise.

            Run the same command again after it was interrupted: the post's id is derived from \
            the circle, the caption and the file's content, so it is stored once; with --state \
            the upload also continues where it stopped instead of starting over.

            Only photos are taken: JPEG, PNG, GIF and WebP. Anything else is refused before a byte \
            is sent, as is a circle that does not exist.

            Exit status: 0 posted; 1 refused (not a photo, too large, no such circle, not a \
            member, …) or timed out; 2 the server could not be reached; 4 the token was refused, \
            or none could be made; 5 the file cannot be read; 64 usage.

            Examples:
              circle upload IMG_0042.jpg --circle general --caption "harbour" --user alice
              circle upload big.png --circle team --token "$TOKEN" \\
                --state ~/.circle-upload.sqlite --metrics
            """
    )

    @Argument(help: "The photo (JPEG, PNG, GIF, WebP).")
    var file: String

    @Option(help: "The circle to post in.")
    var circle: String

    @Option(help: "The post's text.")
    var caption: String?

    @Option(help: "The content type; guessed from the extension, then from the first bytes.")
    var type: String?

    @Option(help: ArgumentHelp("Keep the upload queue in this SQLite file, so an interrupted upload continues on the next run.", valueName: "file"))
    var state: String?

    @Option(help: ArgumentHelp("Upload at most this many bytes per second (suffixes K, M, G; 1 to 1024G).", valueName: "rate"))
    var limitRate: String?

    @Option(help: "Seconds the whole transfer may take, retries included (1 to 86400).")
    var timeout: Int = 600

    @Flag(help: "Print the transfer's metrics (connect, TLS, time to first byte, bytes, retries) to stderr.")
    var metrics = false

    @OptionGroup var client: ClientOptions

    func validate() throws {
        try OptionRanges.check("--timeout", self.timeout, OptionRanges.timeoutSeconds, unit: "seconds")
        if let limitRate {
            guard let rate = parseByteCount(limitRate) else {
                throw ValidationError("--limit-rate takes a byte count from 1 to 1024G per second, such as 500K or 2M; not \"\(limitRate)\"")
            }
            try OptionRanges.check("--limit-rate", rate, OptionRanges.bytesPerSecond, unit: "bytes per second")
        }
    }

    func run() async throws {
        try await reportingFailures("upload", verbose: self.client.verbose, context: self.client.context(circle: self.circle)) {
            try await self.upload()
        }
    }

    private func upload() async throws {
        guard FileManager.default.isReadableFile(atPath: self.file) else {
            throw CLIFailure(.local, "cannot read \(self.file): \(FileManager.default.fileExists(atPath: self.file) ? "permission denied" : "no such file")")
        }
        if self.type == nil, PhotoType.of(file: self.file) == nil {
            throw CLIFailure(
                .refused,
                "\(self.file) is not a photo: Circle takes JPEG, PNG, GIF and WebP (its first bytes are none of these); nothing was sent"
            )
        }
        // Checked in validate().
        let rate = self.limitRate.flatMap(parseByteCount)
        var configuration = try self.client.clientConfiguration(postTimeout: .seconds(self.timeout), announcesPresence: false)
        configuration.stateFile = self.state
        configuration.transfers.transferTimeout = .seconds(self.timeout)
        configuration.transfers.maxUploadBytesPerSecond = rate
        let client = try await self.client.connect(configuration, circle: self.circle, timeout: .seconds(min(self.timeout, 30)))
        let pending = await client.pendingPhotoPosts
        let id = try Self.postID(circle: self.circle, caption: self.caption, file: self.file)
        if pending.contains(id) { Console.err("circle upload: continuing the upload of an earlier run\n") }
        let events = client.transferEvents()
        let metricsTask = Task {
            var last: TransferMetrics?
            for await event in events {
                switch event {
                case .finished(let finishedID, let metrics) where finishedID == id: last = metrics
                case .failed(let failedID, _, let metrics) where failedID == id: last = metrics
                default: continue
                }
                break
            }
            return last
        }
        let bar = ProgressBar(label: "upload")
        do {
            let receipt = try await client.post(photo: self.file, contentType: self.type, caption: self.caption, to: self.circle, id: id) { progress in
                bar.update(progress.completed, of: progress.total)
            }
            bar.finish()
            let media = try await client.history(of: self.circle, before: receipt.seq + 1, limit: 1).posts.last?.attachment ?? "?"
            Console.line("#\(receipt.seq) \(media)")
            if let resumed = await Self.resumedFrom(metricsTask), resumed > 0 {
                Console.err("circle upload: resumed at byte \(resumed)\n")
            }
            if self.metrics, let metrics = await metricsTask.value { Console.err("\(metrics)\n") }
            await client.shutdown()
        } catch {
            bar.finish()
            metricsTask.cancel()
            await client.shutdown()
            var failure = CLIFailure.from(error, self.client.context(circle: self.circle))
            failure.message = "not posted: " + failure.message
            throw failure
        }
    }

    private static func resumedFrom(_ task: Task<TransferMetrics?, Never>) async -> Int64? {
        await task.value?.resumedFrom
    }

    /// The same circle, caption and content give the same post id, so running the command
    /// again posts once.
    static func postID(circle: String, caption: String?, file: String) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: file) else { throw CLIFailure(.local, "cannot read \(file)") }
        defer { try? handle.close() }
        var hasher = SHA256()
        hasher.update(data: Data("\(circle)\n\(caption ?? "")\n".utf8))
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty { hasher.update(data: chunk) }
        return "photo-" + hasher.finalize().prefix(16).map { String(format: "%02x", $0) }.joined()
    }
}

struct DownloadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "download",
        abstract: "Download a photo (media id) from the server.",
        discussion: """
            Writes the media to --output, or else to the media id with the extension of its type \
            (9f86d0….jpg) in the current directory, and prints the path on stdout. Progress goes \
            to stderr. An interrupted download leaves a .part file; running the command again \
            continues from there (Range with If-Range). The bytes are checked against the media \
            id, their SHA-256.

            Exit status: 0 downloaded; 1 refused (no such media, or not yours to see) or failed; \
            2 the server could not be reached; 4 the token was refused, or none could be made; \
            5 the file cannot be written; 64 usage.

            Examples:
              circle download 9f86d0…0f00a08 -o photo.jpg --user bob --data ./circle-data
              circle download 9f86d0…0f00a08 --user bob    # writes 9f86d0…0f00a08.jpg
            """
    )

    @Argument(help: "The media id (a post's attachment).")
    var media: String

    @Option(name: .shortAndLong, help: "Where to write the file.")
    var output: String?

    @Option(help: "Seconds the whole transfer may take, retries included (1 to 86400).")
    var timeout: Int = 600

    @Flag(help: "Print the transfer's metrics to stderr.")
    var metrics = false

    @OptionGroup var client: ClientOptions

    func validate() throws {
        try OptionRanges.check("--timeout", self.timeout, OptionRanges.timeoutSeconds, unit: "seconds")
    }

    func run() async throws {
        try await reportingFailures("download", verbose: self.client.verbose, context: self.client.context()) {
            try await self.download()
        }
    }

    private func download() async throws {
        let output = self.output ?? self.media
        var configuration = try self.client.clientConfiguration(announcesPresence: false)
        configuration.transfers.transferTimeout = .seconds(self.timeout)
        let client = try await self.client.connect(configuration, circle: nil, timeout: .seconds(min(self.timeout, 30)))
        let partial = (try? FileManager.default.attributesOfItem(atPath: output + ".part")[.size] as? NSNumber)?.int64Value ?? 0
        if partial > 0 { Console.err("circle download: resuming at byte \(partial)\n") }
        let bar = ProgressBar(label: "download")
        do {
            let result = try await client.download(media: self.media, to: output) { progress in
                bar.update(progress.completed, of: progress.total)
            }
            bar.finish()
            var path = result.path
            if self.output == nil, let type = result.contentType.flatMap(PhotoType.init(contentType:)) ?? PhotoType.of(file: path) {
                // Named after the media id, with its type's extension, so it opens as a photo.
                let named = path + "." + type.fileExtension
                try? FileManager.default.removeItem(atPath: named)
                do {
                    try FileManager.default.moveItem(atPath: path, toPath: named)
                    path = named
                } catch {
                    throw CLIFailure(.local, "downloaded to \(path), but could not rename it to \(named)", detail: "\(error)")
                }
            }
            Console.line(path)
            if self.metrics { Console.err("\(result.metrics)\n") }
            await client.shutdown()
        } catch {
            bar.finish()
            await client.shutdown()
            throw error
        }
    }
}

/// `500`, `500K`, `2M`, `1G` as bytes; `nil` for anything else, and for a count that does not
/// fit in an `Int`.
func parseByteCount(_ text: String) -> Int? {
    let lower = text.lowercased()
    let units: [(String, Int)] = [("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)]
    for (suffix, factor) in units where lower.hasSuffix(suffix) {
        guard let number = Int(lower.dropLast()) else { return nil }
        let (bytes, overflow) = number.multipliedReportingOverflow(by: factor)
        return overflow ? nil : bytes
    }
    return Int(lower)
}

/// Transfer progress on stderr: on a terminal, one line redrawn in place with the speed and
/// the time left, cleared at the end; otherwise a line per 10%.
final class ProgressBar: @unchecked Sendable {
    // @unchecked: every field is touched only while `lock` is held.
    private let lock = NSLock()
    private let label: String
    private let isTerminal = Console.stderrIsTerminal
    private var lastStep = -1
    private var drawn = false
    private var lastDraw = ContinuousClock.now - .seconds(1)
    private let started = ContinuousClock.now
    /// The first progress seen: bytes that were already there (a resumed transfer) do not count
    /// towards the speed.
    private var firstCompleted: Int64?

    init(label: String) {
        self.label = label
    }

    func update(_ completed: Int64, of total: Int64?) {
        self.lock.withLock {
            let fraction = total.map { $0 > 0 ? min(1, Double(completed) / Double($0)) : 1 }
            if self.firstCompleted == nil { self.firstCompleted = completed }
            if self.isTerminal {
                guard ContinuousClock.now - self.lastDraw > .milliseconds(100) || fraction == 1 else { return }
                self.lastDraw = .now
                let width = 24
                let filled = Int((fraction ?? 0) * Double(width))
                let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
                let percent = fraction.map { String(format: "%3d%%", Int($0 * 100)) } ?? "   ?"
                let elapsed = Self.seconds(ContinuousClock.now - self.started)
                let moved = completed - (self.firstCompleted ?? 0)
                let speed = elapsed > 0.2 ? Double(moved) / elapsed : nil
                var line = "\r\u{1B}[K\(self.label) [\(bar)] \(percent) \(formatBytes(completed))\(total.map { "/" + formatBytes($0) } ?? "")"
                if let speed, speed > 0 {
                    line += "  \(formatBytes(Int64(speed)))/s"
                    if let total, total > completed {
                        line += "  \(Self.clock(Double(total - completed) / speed)) left"
                    }
                }
                Console.err(line)
                self.drawn = true
            } else if let fraction {
                let step = Int(fraction * 10)
                guard step > self.lastStep else { return }
                self.lastStep = step
                Console.err("\(self.label): \(step * 10)% (\(completed)/\(total ?? 0) bytes)\n")
            }
        }
    }

    /// Clears the bar's line, so what comes next starts on a clean line.
    func finish() {
        self.lock.withLock {
            if self.drawn { Console.err("\r\u{1B}[K") }
            self.drawn = false
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// `42s`, `3m05s`, `1h02m`.
    static func clock(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "?" }
        let total = Int(seconds.rounded(.up))
        if total < 60 { return "\(total)s" }
        if total < 3600 { return String(format: "%dm%02ds", total / 60, total % 60) }
        return String(format: "%dh%02dm", total / 3600, (total % 3600) / 60)
    }
}

/// The photo types Circle takes, from a `Content-Type`, an extension or the first bytes.
enum PhotoType: String {
    case jpeg = "image/jpeg"
    case png = "image/png"
    case gif = "image/gif"
    case webp = "image/webp"

    init?(contentType: String) {
        let bare = contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        self.init(rawValue: bare == "image/jpg" ? "image/jpeg" : bare)
    }

    var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        case .png: "png"
        case .gif: "gif"
        case .webp: "webp"
        }
    }

    /// The type of a file by its first bytes; `nil` when it is none of the photo types.
    static func of(file: String) -> PhotoType? {
        guard let handle = FileHandle(forReadingAtPath: file) else { return nil }
        defer { try? handle.close() }
        guard let head = try? handle.read(upToCount: 12) else { return nil }
        let bytes = [UInt8](head)
        if bytes.starts(with: [0xFF, 0xD8, 0xFF]) { return .jpeg }
        if bytes.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if bytes.starts(with: Array("GIF87a".utf8)) || bytes.starts(with: Array("GIF89a".utf8)) { return .gif }
        if bytes.count >= 12, bytes.starts(with: Array("RIFF".utf8)), Array(bytes[8..<12]) == Array("WEBP".utf8) { return .webp }
        return nil
    }
}

private func formatBytes(_ count: Int64) -> String {
    if count >= 1 << 20 { return String(format: "%.1f MiB", Double(count) / Double(1 << 20)) }
    if count >= 1 << 10 { return String(format: "%.1f KiB", Double(count) / Double(1 << 10)) }
    return "\(count) B"
}

import ArgumentParser
import CircleClient
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

            Exit status: 0 posted; 1 refused by the server (too large, wrong type, not a member, …) \
            or timed out; 2 the server could not be reached; 64 usage.

            Examples:
              circle upload IMG_0042.jpg --circle general --caption "harbour" --user alice --data ./circle-data
              circle upload big.png --circle team --token "$TOKEN" --state ~/.circle-upload.sqlite --metrics
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

    @Option(help: ArgumentHelp("Upload at most this many bytes per second (suffixes K, M).", valueName: "rate"))
    var limitRate: String?

    @Option(help: "Seconds the whole transfer may take, retries included.")
    var timeout: Int = 600

    @Flag(help: "Print the transfer's metrics (connect, TLS, time to first byte, bytes, retries) to stderr.")
    var metrics = false

    @OptionGroup var client: ClientOptions

    func run() async throws {
        guard FileManager.default.isReadableFile(atPath: self.file) else {
            exitWithFailure("upload", CLIFailure("cannot read \(self.file)", exitCode: 64))
        }
        var rate: Int?
        if let limitRate {
            guard let parsed = parseByteCount(limitRate), parsed > 0 else {
                throw ValidationError("--limit-rate takes a byte count such as 500K or 2M")
            }
            rate = parsed
        }
        var configuration = try self.client.clientConfiguration(postTimeout: .seconds(self.timeout))
        configuration.stateFile = self.state
        configuration.transfers.transferTimeout = .seconds(self.timeout)
        configuration.transfers.maxUploadBytesPerSecond = rate
        let client = try await CircleClient(configuration: configuration)
        let pending = await client.pendingPhotoPosts
        let id = try Self.postID(circle: self.circle, caption: self.caption, file: self.file)
        if pending.contains(id) { FileHandle.standardError.write(Data("circle upload: continuing the upload of an earlier run\n".utf8)) }
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
        await client.connect()
        let bar = ProgressBar(label: "upload")
        do {
            let receipt = try await client.post(photo: self.file, contentType: self.type, caption: self.caption, to: self.circle, id: id) { progress in
                bar.update(progress.completed, of: progress.total)
            }
            bar.finish()
            let media = try await client.history(of: self.circle, before: receipt.seq + 1, limit: 1).posts.last?.attachment ?? "?"
            FileHandle.standardOutput.write(Data("#\(receipt.seq) \(media)\n".utf8))
            if let resumed = await Self.resumedFrom(metricsTask), resumed > 0 {
                FileHandle.standardError.write(Data("circle upload: resumed at byte \(resumed)\n".utf8))
            }
            if self.metrics, let metrics = await metricsTask.value { FileHandle.standardError.write(Data("\(metrics)\n".utf8)) }
            await client.shutdown()
        } catch let error as CircleClientError {
            bar.finish()
            metricsTask.cancel()
            await client.shutdown()
            let unreachable = error.code == .notConnected
            exitWithFailure("upload", CLIFailure("not posted: \(error.message) (\(error.code))", exitCode: unreachable ? 2 : 1))
        }
    }

    private static func resumedFrom(_ task: Task<TransferMetrics?, Never>) async -> Int64? {
        await task.value?.resumedFrom
    }

    /// The same circle, caption and content give the same post id, so running the command
    /// again posts once.
    static func postID(circle: String, caption: String?, file: String) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: file) else { throw CLIFailure("cannot read \(file)", exitCode: 64) }
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
            Writes the media to FILE (default: the media id in the current directory) and prints \
            the path on stdout. Progress goes to stderr. An interrupted download leaves FILE.part; \
            running the command again continues from there (Range with If-Range). The bytes are \
            checked against the media id, their SHA-256.

            Exit status: 0 downloaded; 1 refused (no such media, or not yours to see) or failed; \
            2 the server could not be reached; 64 usage.

            Example:
              circle download 9f86d0…0f00a08 -o photo.jpg --user bob --data ./circle-data
            """
    )

    @Argument(help: "The media id (a post's attachment).")
    var media: String

    @Option(name: .shortAndLong, help: "Where to write the file.")
    var output: String?

    @Option(help: "Seconds the whole transfer may take, retries included.")
    var timeout: Int = 600

    @Flag(help: "Print the transfer's metrics to stderr.")
    var metrics = false

    @OptionGroup var client: ClientOptions

    func run() async throws {
        let output = self.output ?? self.media
        var configuration = try self.client.clientConfiguration()
        configuration.transfers.transferTimeout = .seconds(self.timeout)
        let client = try await CircleClient(configuration: configuration)
        let partial = (try? FileManager.default.attributesOfItem(atPath: output + ".part")[.size] as? NSNumber)?.int64Value ?? 0
        if partial > 0 { FileHandle.standardError.write(Data("circle download: resuming at byte \(partial)\n".utf8)) }
        let bar = ProgressBar(label: "download")
        do {
            let result = try await client.download(media: self.media, to: output) { progress in
                bar.update(progress.completed, of: progress.total)
            }
            bar.finish()
            FileHandle.standardOutput.write(Data("\(result.path)\n".utf8))
            if self.metrics { FileHandle.standardError.write(Data("\(result.metrics)\n".utf8)) }
            await client.shutdown()
        } catch let error as CircleClientError {
            bar.finish()
            await client.shutdown()
            exitWithFailure("download", CLIFailure("\(error.message) (\(error.code))", exitCode: error.code == .notConnected ? 2 : 1))
        }
    }
}

/// `500`, `500K`, `2M`, `1G` as bytes.
func parseByteCount(_ text: String) -> Int? {
    let lower = text.lowercased()
    let units: [(String, Int)] = [("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)]
    for (suffix, factor) in units where lower.hasSuffix(suffix) {
        return Int(lower.dropLast()).map { $0 * factor }
    }
    return Int(lower)
}

/// Transfer progress on stderr: a redrawn bar on a terminal, a line per 10% otherwise.
final class ProgressBar: @unchecked Sendable {
    // @unchecked: every field is touched only while `lock` is held.
    private let lock = NSLock()
    private let label: String
    private let isTerminal = isatty(STDERR_FILENO) == 1
    private var lastStep = -1
    private var drawn = false
    private var lastDraw = ContinuousClock.now - .seconds(1)

    init(label: String) {
        self.label = label
    }

    func update(_ completed: Int64, of total: Int64?) {
        self.lock.withLock {
            let fraction = total.map { $0 > 0 ? Double(completed) / Double($0) : 1 }
            if self.isTerminal {
                guard ContinuousClock.now - self.lastDraw > .milliseconds(100) || fraction == 1 else { return }
                self.lastDraw = .now
                let width = 30
                let filled = Int((fraction ?? 0) * Double(width))
                let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
                let percent = fraction.map { String(format: "%3d%%", Int($0 * 100)) } ?? "   ?"
                let line = "\r\(self.label) [\(bar)] \(percent) \(formatBytes(completed))\(total.map { "/" + formatBytes($0) } ?? "")"
                FileHandle.standardError.write(Data(line.utf8))
                self.drawn = true
            } else if let fraction {
                let step = Int(fraction * 10)
                guard step > self.lastStep else { return }
                self.lastStep = step
                FileHandle.standardError.write(Data("\(self.label): \(step * 10)% (\(completed)/\(total ?? 0) bytes)\n".utf8))
            }
        }
    }

    func finish() {
        self.lock.withLock {
            if self.drawn { FileHandle.standardError.write(Data("\n".utf8)) }
            self.drawn = false
        }
    }
}

private func formatBytes(_ count: Int64) -> String {
    if count >= 1 << 20 { return String(format: "%.1f MiB", Double(count) / Double(1 << 20)) }
    if count >= 1 << 10 { return String(format: "%.1f KiB", Double(count) / Double(1 << 10)) }
    return "\(count) B"
}

import Foundation
import Logging
import NIOConcurrencyHelpers

/// The log lines of `circle serve`, message first so that a person scanning the log reads what
/// happened before the details:
///
///     2026-11-24T20:14:03Z info     connected  user=alice address=127.0.0.1:51234
///
/// Metadata follow as `key=value`, sorted, without the `circle.` prefix the libraries use.
/// Lines go to standard error with `write(2)`, which fails quietly on a closed pipe.
struct ServerLogHandler: LogHandler {
    /// The level of every logger this handler serves unless one sets its own: `--log-level`,
    /// changed on SIGHUP (``ConfigurationReloader``).
    static let level = NIOLockedValueBox(Logger.Level.info)

    private var ownLevel: Logger.Level?
    var logLevel: Logger.Level {
        get { self.ownLevel ?? Self.level.withLockedValue { $0 } }
        set { self.ownLevel = newValue }
    }
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String) {}

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = self.metadata
        if let provided = self.metadataProvider?.get() { all.merge(provided) { $1 } }
        if let extra = event.metadata { all.merge(extra) { $1 } }
        let details = all.sorted { $0.key < $1.key }.map { key, value in
            let name = key.hasPrefix("circle.") ? String(key.dropFirst("circle.".count)) : key
            let text = "\(value)"
            return text.contains(" ") ? "\(name)=\"\(text)\"" : "\(name)=\(text)"
        }
        let level = event.level.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)
        let time = Date().formatted(.iso8601)
        let line = "\(time) \(level) \(event.message)\(details.isEmpty ? "" : "  " + details.joined(separator: " "))\n"
        _ = line.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
    }
}

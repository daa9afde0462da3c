import CoreMetrics
import Foundation
import Prometheus

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The server's metrics, recorded through swift-metrics into a Prometheus registry of its own
/// (no global bootstrap, so several servers can live in one test process); `GET /metrics`
/// renders the registry as Prometheus text.
final class ServerMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory

    let connections: CoreMetrics.Meter
    let connectionsOpened: CoreMetrics.Counter
    let joins: CoreMetrics.Counter
    let posts: CoreMetrics.Counter
    let duplicatePosts: CoreMetrics.Counter
    let deliveries: CoreMetrics.Counter
    let commitLatency: CoreMetrics.Timer
    let fanoutLatency: CoreMetrics.Timer
    /// A publish hook's call, from sending the entry to its verdict (or failure).
    let publishHookLatency: CoreMetrics.Timer
    let commitBatchSize: CoreMetrics.Recorder
    let mediaBytesReceived: CoreMetrics.Counter
    let mediaBytesSent: CoreMetrics.Counter
    let mediaStored: CoreMetrics.Counter
    let nodeSignalsSent: CoreMetrics.Counter
    let nodeSignalsReceived: CoreMetrics.Counter
    let nodeReads: CoreMetrics.Counter
    let heapTrims: CoreMetrics.Counter
    /// Entries removed by retention policies.
    let retentionRemoved: CoreMetrics.Counter
    /// Pushes not sent because their recipient was connected (``PushPresence``).
    let pushesSkipped: CoreMetrics.Counter
    /// Users' connection counts written to the store for the away rule (``PresenceRecorder``).
    let connectionMarks: CoreMetrics.Counter
    /// Posts the search backfill has indexed (those stored before the index existed).
    let searchBackfillIndexed: CoreMetrics.Meter
    /// 1 once the search index holds every post, 0 while the backfill runs.
    let searchIndexReady: CoreMetrics.Meter

    init() {
        _ = ProcessMetrics.processStart
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        let latencyBuckets: [Duration] = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2),
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
            .milliseconds(250), .milliseconds(500), .seconds(1),
        ]
        factory.defaultDurationHistogramBuckets = latencyBuckets
        factory.defaultValueHistogramBuckets = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        self.registry = registry
        self.factory = factory
        self.connections = CoreMetrics.Meter(label: "circle_connections", factory: factory)
        self.searchBackfillIndexed = CoreMetrics.Meter(label: "circle_search_backfill_indexed_posts", factory: factory)
        self.searchIndexReady = CoreMetrics.Meter(label: "circle_search_index_ready", factory: factory)
        self.connectionsOpened = CoreMetrics.Counter(label: "circle_connections_opened_total", factory: factory)
        self.joins = CoreMetrics.Counter(label: "circle_joins_total", factory: factory)
        self.posts = CoreMetrics.Counter(label: "circle_posts_total", factory: factory)
        self.duplicatePosts = CoreMetrics.Counter(label: "circle_duplicate_posts_total", factory: factory)
        self.deliveries = CoreMetrics.Counter(label: "circle_deliveries_total", factory: factory)
        self.commitLatency = CoreMetrics.Timer(label: "circle_commit_seconds", factory: factory)
        self.fanoutLatency = CoreMetrics.Timer(label: "circle_fanout_seconds", factory: factory)
        self.publishHookLatency = CoreMetrics.Timer(label: "circle_publish_hook_seconds", factory: factory)
        self.commitBatchSize = CoreMetrics.Recorder(label: "circle_commit_batch_size", factory: factory)
        self.mediaBytesReceived = CoreMetrics.Counter(label: "circle_media_received_bytes_total", factory: factory)
        self.mediaBytesSent = CoreMetrics.Counter(label: "circle_media_sent_bytes_total", factory: factory)
        self.mediaStored = CoreMetrics.Counter(label: "circle_media_uploads_completed_total", factory: factory)
        self.nodeSignalsSent = CoreMetrics.Counter(label: "circle_node_signals_sent_total", factory: factory)
        self.nodeSignalsReceived = CoreMetrics.Counter(label: "circle_node_signals_received_total", factory: factory)
        self.nodeReads = CoreMetrics.Counter(label: "circle_node_reads_total", factory: factory)
        self.heapTrims = CoreMetrics.Counter(label: "circle_heap_trims_total", factory: factory)
        self.retentionRemoved = CoreMetrics.Counter(label: "circle_retention_removed_entries_total", factory: factory)
        self.pushesSkipped = CoreMetrics.Counter(label: "circle_pushes_skipped_connected_total", factory: factory)
        self.connectionMarks = CoreMetrics.Counter(label: "circle_connection_marks_written_total", factory: factory)
    }

    /// Counts an error reply or refusal by its code.
    func error(_ code: String) {
        CoreMetrics.Counter(label: "circle_errors_total", dimensions: [("code", code)], factory: self.factory).increment()
    }

    /// Counts a limit that was reached (a connection refused or closed, a request refused), by
    /// the limit's name; docs/API.md lists the names.
    func limitHit(_ limit: String) {
        CoreMetrics.Counter(label: "circle_limit_hits_total", dimensions: [("limit", limit)], factory: self.factory).increment()
    }

    /// Counts a push that was settled (sent or not) by how: docs/API.md lists the results.
    func push(_ result: PushResult) {
        let name: String
        switch result {
        case .delivered: name = "delivered"
        case .gone: name = "gone"
        case .retry: name = "retry"
        case .dropped: name = "dropped"
        case .released: return
        case .present: name = "present"
        case .folded: name = "folded"
        case .deferred: name = "deferred"
        }
        CoreMetrics.Counter(label: "circle_pushes_total", dimensions: [("result", name)], factory: self.factory).increment()
    }

    /// Counts an HTTP request by route and status.
    func httpRequest(route: String, status: UInt) {
        CoreMetrics.Counter(label: "circle_http_requests_total", dimensions: [("route", route), ("status", "\(status)")], factory: self.factory)
            .increment()
    }

    /// The registry as Prometheus text, each family with its `# HELP` line, followed by the
    /// process metrics and `circle_build_info`.
    func render() -> [UInt8] {
        var text = ""
        for line in self.registry.emitToString().split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("# TYPE ") {
                let name = line.dropFirst(7).prefix { $0 != " " }
                if let help = Self.help[String(name)] { text += "# HELP \(name) \(help)\n" }
            }
            text += line
            text += "\n"
        }
        while text.hasSuffix("\n\n") { text.removeLast() }
        text += ProcessMetrics.current().prometheusText
        text += "# HELP circle_build_info The version of this server; the value is always 1.\n"
        text += "# TYPE circle_build_info gauge\n"
        text += "circle_build_info{version=\"\(CircleVersion.current)\",os=\"\(ProcessMetrics.osName)\"} 1\n"
        return Array(text.utf8)
    }

    /// What each of the server's own metric families counts.
    static let help: [String: String] = [
        "circle_connections": "Open WebSocket chat connections.",
        "circle_connections_opened_total": "WebSocket chat connections opened since the start.",
        "circle_joins_total": "Joins of circles that were accepted.",
        "circle_posts_total": "Posts stored.",
        "circle_duplicate_posts_total": "Posts sent again with an id already stored (answered with the first ack).",
        "circle_deliveries_total": "Posts handed to subscribed connections.",
        "circle_commit_seconds": "Time to commit a group of posts to the store.",
        "circle_fanout_seconds": "Time from commit to the posts being handed to every subscriber.",
        "circle_commit_batch_size": "Posts per group commit.",
        "circle_media_received_bytes_total": "Bytes of media uploads received.",
        "circle_media_sent_bytes_total": "Bytes of media downloads sent.",
        "circle_media_uploads_completed_total": "Media uploads completed and stored.",
        "circle_node_signals_sent_total": "Signals sent to the other nodes sharing the store.",
        "circle_node_signals_received_total": "Signals received from the other nodes sharing the store.",
        "circle_node_reads_total": "Store reads for posts this node learned of without their content (holes, lost signals).",
        "circle_pushes_total": "Pushes claimed from the outbox, by what became of them: delivered, gone, retry, dropped, present, folded, deferred.",
        "circle_pushes_skipped_connected_total": "Pushes not sent because their recipient was connected, or was within --push-away-after.",
        "circle_connection_marks_written_total": "Users' connection counts this node wrote to the store for the push away rule (at connection opens and closes, coalesced).",
        "circle_heap_trims_total": "Times the server returned the allocator's free pages to the kernel (heapTrimInterval).",
        "circle_errors_total": "Error replies and refusals, by error code.",
        "circle_http_requests_total": "HTTP requests, by route and status.",
    ]
}

/// CPU time, memory and open file descriptors of this process, read when `/metrics` is asked,
/// with the standard Prometheus names (`process_*`).
struct ProcessMetrics {
    var cpuSeconds: Double
    var residentBytes: Int?
    var virtualBytes: Int?
    var openFileDescriptors: Int?
    var startTime: Double

    /// When this process started (seconds since 1970), taken when the metrics were first made.
    static let processStart = Date().timeIntervalSince1970

    static var osName: String {
        #if os(Linux)
        "linux"
        #elseif os(macOS)
        "macos"
        #else
        "other"
        #endif
    }

    static func current() -> ProcessMetrics {
        let usage = processResourceUsage()
        let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        var metrics = ProcessMetrics(cpuSeconds: cpu, startTime: Self.processStart)
        #if os(Linux)
        if let sizes = Self.memorySizes() {
            metrics.virtualBytes = sizes.virtual
            metrics.residentBytes = sizes.resident
        }
        metrics.openFileDescriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count
        #endif
        return metrics
    }

    /// The process's virtual and resident sizes in bytes, from `/proc/self/statm` (Linux only).
    static func memorySizes() -> (virtual: Int, resident: Int)? {
        #if os(Linux)
        // statm: sizes in pages; the first is the virtual size, the second the resident set.
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = statm.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard fields.count >= 2 else { return nil }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        return (fields[0] * page, fields[1] * page)
        #else
        return nil
        #endif
    }

    init(cpuSeconds: Double, startTime: Double) {
        self.cpuSeconds = cpuSeconds
        self.startTime = startTime
    }

    var prometheusText: String {
        var text = ""
        func add(_ name: String, _ type: String, _ help: String, _ value: String?) {
            guard let value else { return }
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
        }
        add("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.", String(format: "%.3f", self.cpuSeconds))
        add("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", self.residentBytes.map(String.init))
        add("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", self.virtualBytes.map(String.init))
        add("process_open_fds", "gauge", "Open file descriptors.", self.openFileDescriptors.map(String.init))
        add("process_start_time_seconds", "gauge", "When the process started, in seconds since 1970.", String(format: "%.3f", self.startTime))
        return text
    }
}

/// This process's resource usage so far (all threads): `getrusage(RUSAGE_SELF)`.
package func processResourceUsage() -> rusage {
    var usage = rusage()
    #if canImport(Glibc)
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    #else
    getrusage(RUSAGE_SELF, &usage)
    #endif
    return usage
}

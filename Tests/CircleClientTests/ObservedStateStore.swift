@testable import CircleClient

/// A state store for tests that watch some of its calls: each test store implements those, and
/// every other call does nothing (a load finds nothing).
protocol ObservedStateStore: ClientStateStore {}

extension ObservedStateStore {
    func load() async throws -> (outbox: [OutboxEntry], sent: Set<String>, cursors: [String: Int64]) { ([], [], [:]) }
    func enqueue(_ entry: OutboxEntry, sent: Bool) async throws {}
    func markSent(_ ids: [String]) async throws {}
    func remove(id: String) async throws {}
    func setCursor(_ seq: Int64, for circle: String) async throws {}
    func loadPhotoJobs() async throws -> [PhotoJob] { [] }
    func savePhotoJob(_ job: PhotoJob) async throws {}
    func removePhotoJob(id: String) async throws {}
    func close() async {}
}

import Foundation

/// Downloaded media on disk: `<id>` (the bytes), `<id>.json` (validator, expiry, type), and
/// `<id>.part` / `<id>.part.json` for a download in progress. Bounded by size; the least
/// recently used entries go first. Used from one actor, so it needs no locking of its own.
struct MediaCache: Sendable {
    struct Entry: Codable, Sendable {
        var etag: String?
        /// Seconds since 1970 after which the entry must be revalidated.
        var expires: Double
        var contentType: String?
        var size: Int64
    }

    let directory: String
    let capacity: Int64

    init(directory: String, capacity: Int64) {
        self.directory = directory
        self.capacity = capacity
    }

    /// Creates the directory (at the first download, so apps that never download get none).
    func prepare() throws {
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
    }

    func path(_ id: String) -> String { (self.directory as NSString).appendingPathComponent(id) }
    func partialPath(_ id: String) -> String { self.path(id) + ".part" }

    /// The cached entry of `id`, if its bytes are there.
    func lookup(_ id: String) -> Entry? {
        guard let data = FileManager.default.contents(atPath: self.path(id) + ".json"),
            let entry = try? JSONDecoder().decode(Entry.self, from: data),
            FileManager.default.fileExists(atPath: self.path(id))
        else { return nil }
        return entry
    }

    /// Records a use (for LRU) and, after a revalidation, the new expiry.
    func touch(_ id: String, entry: Entry? = nil) {
        if let entry, let data = try? JSONEncoder().encode(entry) {
            _ = FileManager.default.createFile(atPath: self.path(id) + ".json", contents: data)
        }
        try? FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: self.path(id))
    }

    /// Moves a finished download in, then evicts down to the capacity (never the new entry).
    func store(_ id: String, from file: String, entry: Entry) throws {
        let destination = self.path(id)
        try? FileManager.default.removeItem(atPath: destination)
        try FileManager.default.moveItem(atPath: file, toPath: destination)
        _ = FileManager.default.createFile(atPath: destination + ".json", contents: try JSONEncoder().encode(entry))
        self.evict(keeping: id)
    }

    /// Total bytes of the cached media.
    func totalSize() -> Int64 {
        self.files().reduce(0) { $0 + $1.size }
    }

    private func files() -> [(id: String, size: Int64, used: Date)] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: self.directory)) ?? []
        return names.compactMap { name in
            guard !name.contains(".") else { return nil }
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: self.path(name)) else { return nil }
            let size = (attributes[.size] as? NSNumber)?.int64Value ?? 0
            return (name, size, attributes[.modificationDate] as? Date ?? .distantPast)
        }
    }

    private func evict(keeping id: String) {
        var entries = self.files().sorted { $0.used < $1.used }
        var total = entries.reduce(0) { $0 + $1.size }
        while total > self.capacity, let oldest = entries.first {
            entries.removeFirst()
            if oldest.id == id { continue }
            try? FileManager.default.removeItem(atPath: self.path(oldest.id))
            try? FileManager.default.removeItem(atPath: self.path(oldest.id) + ".json")
            total -= oldest.size
        }
    }
}

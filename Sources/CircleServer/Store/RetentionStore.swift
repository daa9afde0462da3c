/// What retention needs from a store (docs/OPERATIONS.md, "Retention"): each circle's policy,
/// its oldest entries, and removing them in bounded transactions.
public protocol RetentionStore: Sendable {
    /// The policy of `circle`, or `nil` when it keeps everything.
    func retentionPolicy(of circle: String) async throws -> RetentionPolicy?
    /// Sets (or, with `nil`, removes) the policy of `circle`. The circle must exist.
    func setRetentionPolicy(_ policy: RetentionPolicy?, of circle: String) async throws
    /// Every circle that has a policy, by name.
    func retentionPolicies() async throws -> [String: RetentionPolicy]
    /// The oldest `limit` entries of `circle` (posts and change entries, system entries too), as
    /// (seq, time), in `seq` order.
    func oldestEntries(in circle: String, limit: Int) async throws -> [RetainedEntry]
    /// In one transaction: removes the entries of `circle` with `seq ≤ through` (the caller
    /// bounds how many: ``RetentionPolicy/trimThrough(oldest:lastSeq:now:)`` looks at a batch),
    /// with their search index rows, reactions and mention rows, and the media that no remaining
    /// post has as its attachment (their ids are returned, so that the files go too). The
    /// circle's `last_seq` stays: later entries keep their numbers and new ones follow them.
    func trimEntries(in circle: String, through seq: Int64) async throws -> TrimmedEntries
    /// Makes the next entry of `circle`, which has none yet, `seq + 1`: an import of a circle
    /// whose retention policy had removed entries 1…`seq` goes on with the numbers they left.
    /// Changes nothing when the circle has entries (its `last_seq` is not 0).
    func startCircle(_ circle: String, after seq: Int64) async throws
}

/// A circle's retention policy: entries older than `maxAgeDays`, and entries beyond the newest
/// `keepNewest`, are removed in the background. Either may be absent (no such limit).
public struct RetentionPolicy: Sendable, Hashable {
    public var maxAgeDays: Int64?
    public var keepNewest: Int64?

    public init(maxAgeDays: Int64?, keepNewest: Int64?) {
        self.maxAgeDays = maxAgeDays
        self.keepNewest = keepNewest
    }

    /// The longest age a policy may set: 100 years.
    public static let maximumDays: Int64 = 36_500
    /// The most entries a policy may keep.
    public static let maximumKeep: Int64 = 1_000_000_000

    /// What is wrong with the policy, for a 400; `nil` when it can be set.
    public var problem: String? {
        if let days = self.maxAgeDays, !(1...Self.maximumDays).contains(days) {
            return "\"days\" is from 1 to \(Self.maximumDays), not \(days)"
        }
        if let keep = self.keepNewest, !(1...Self.maximumKeep).contains(keep) {
            return "\"keep\" is from 1 to \(Self.maximumKeep), not \(keep)"
        }
        return nil
    }

    /// The newest entry to remove among `oldest` (a circle's oldest entries, in `seq` order),
    /// or `nil` for none. Entries go from the oldest on while each is due — older than the age
    /// limit or beyond the newest `keepNewest` of a circle whose newest entry is `lastSeq` — and
    /// the first one that is not due stops it: what is kept is always the newest part of the
    /// stream, whatever the times of imported entries.
    public func trimThrough(oldest: [RetainedEntry], lastSeq: Int64, now: Int64) -> Int64? {
        let cutoff = self.maxAgeDays.map { now - $0 * 86_400_000 }
        let beyond = self.keepNewest.map { lastSeq - $0 }
        var through: Int64?
        for entry in oldest {
            let old = cutoff.map { entry.time < $0 } ?? false
            let surplus = beyond.map { entry.seq <= $0 } ?? false
            guard old || surplus else { break }
            through = entry.seq
        }
        return through
    }
}

/// An entry as retention sees it.
public struct RetainedEntry: Sendable, Hashable {
    public var seq: Int64
    /// Commit time, milliseconds since 1970.
    public var time: Int64

    public init(seq: Int64, time: Int64) {
        self.seq = seq
        self.time = time
    }
}

/// What ``RetentionStore/trimEntries(in:through:)`` removed.
public struct TrimmedEntries: Sendable, Hashable {
    /// Entries removed.
    public var entries: Int
    /// Media whose files are to be deleted: no remaining post has them.
    public var media: [String]

    public init(entries: Int, media: [String]) {
        self.entries = entries
        self.media = media
    }
}

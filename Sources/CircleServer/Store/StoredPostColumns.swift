import CircleWire

/// How the named columns of a stored post read back, the same in every store: a name this
/// version does not know is a damaged (or newer) database, reported as `unavailable` with the
/// name, never guessed.
enum StoredPostColumns {
    /// The `change` column: what a change entry does (`nil` for a post).
    static func change(_ name: String?, store: String) throws -> CircleChange? {
        guard let name else { return nil }
        guard let change = CircleChange(rawValue: name) else {
            throw StoreError(.unavailable, "\(store) store: unknown change \"\(name)\" in the posts table")
        }
        return change
    }

    /// The `event` column: what a system entry reports (`nil` for other entries).
    static func event(_ name: String?, store: String) throws -> CircleSystemEvent? {
        guard let name else { return nil }
        guard let event = CircleSystemEvent(rawValue: name) else {
            throw StoreError(.unavailable, "\(store) store: unknown event \"\(name)\" in the posts table")
        }
        return event
    }
}

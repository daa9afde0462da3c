/// The JSON shapes of moderation (docs/API.md, "Moderation").
extension HTTPAPI.Path {
    /// `PUT`: whether a circle is read-only for its members.
    public static func readOnly(_ circle: String) -> String { Pattern.readOnly.path(circle) }
    /// `POST`: ends every connection of a user, on every node.
    public static func adminUserDisconnect(_ name: String) -> String { Pattern.adminUserDisconnect.path(name) }
}

extension HTTPAPI {
    /// `PUT /v1/circles/{name}/read-only`, and its answer.
    public struct ReadOnly: Codable, Sendable, Hashable {
        /// Set in the answer only.
        public var circle: String?
        public var readOnly: Bool
        public init(circle: String? = nil, readOnly: Bool) {
            self.circle = circle
            self.readOnly = readOnly
        }
    }

    /// `PUT /v1/circles/{name}/system-entries`: whether the circle records membership changes as
    /// system entries (on by default). The answer is the circle (``Circle``).
    public struct SystemEntries: Codable, Sendable, Hashable {
        public var enabled: Bool
        public init(enabled: Bool) {
            self.enabled = enabled
        }
    }
}

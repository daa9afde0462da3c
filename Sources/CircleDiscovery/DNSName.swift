/// A domain name as a list of labels, compared without regard to ASCII case (RFC 6762 §16).
///
/// Labels are raw bytes: DNS-SD instance names may hold spaces, dots and any UTF-8
/// (RFC 6763 §4.3), so `"Alice's Circle._circle._tcp.local"` has four labels, the first being
/// `Alice's Circle`. Build names from labels, not by splitting a string on dots.
public struct DNSName: Sendable, Hashable, CustomStringConvertible {
    /// The labels, most specific first; the root is the empty list.
    public private(set) var labels: [[UInt8]]

    /// A name from its labels, most specific first.
    /// - Parameter labels: each 1–63 bytes; the whole name at most 255 bytes on the wire.
    public init(labels: [[UInt8]]) throws {
        var wireLength = 1
        for label in labels {
            guard !label.isEmpty, label.count <= 63 else { throw DNSMessageError("a DNS label must be 1 to 63 bytes") }
            wireLength += 1 + label.count
        }
        guard wireLength <= 255 else { throw DNSMessageError("a DNS name must be at most 255 bytes") }
        self.labels = labels
    }

    /// A name from labels given as strings (UTF-8), most specific first.
    public init(_ labels: [String]) throws {
        try self.init(labels: labels.map { Array($0.utf8) })
    }

    /// A name from dotted text such as `_circle._tcp.local`; use ``init(_:)-(String...)`` when a
    /// label itself contains a dot.
    public init(dotted text: String) throws {
        try self.init(text.split(separator: ".", omittingEmptySubsequences: true).map(String.init))
    }

    init(unchecked labels: [[UInt8]]) {
        self.labels = labels
    }

    /// The name with `label` put in front (an instance under a service type, a host under `local`).
    public func prepending(_ label: String) throws -> DNSName {
        try DNSName(labels: [Array(label.utf8)] + self.labels)
    }

    /// The name without its first label; the root stays the root.
    public var parent: DNSName { DNSName(unchecked: Array(self.labels.dropFirst())) }

    /// The first label as text (invalid UTF-8 replaced), or "" for the root.
    public var firstLabel: String { self.labels.first.map { String(decoding: $0, as: UTF8.self) } ?? "" }

    /// The name in the usual dotted presentation, with dots and backslashes inside labels escaped.
    public var description: String {
        self.labels.map { label in
            var text = ""
            for scalar in String(decoding: label, as: UTF8.self).unicodeScalars {
                if scalar == "." || scalar == "\\" { text.append("\\") }
                text.unicodeScalars.append(scalar)
            }
            return text
        }.joined(separator: ".") + "."
    }

    /// Labels folded to lower case, the key under which names compare equal.
    var folded: [[UInt8]] { self.labels.map { $0.map(Self.lower) } }

    static func lower(_ byte: UInt8) -> UInt8 { byte >= 65 && byte <= 90 ? byte + 32 : byte }

    public static func == (lhs: DNSName, rhs: DNSName) -> Bool {
        guard lhs.labels.count == rhs.labels.count else { return false }
        for (left, right) in zip(lhs.labels, rhs.labels) {
            guard left.count == right.count else { return false }
            for (a, b) in zip(left, right) where Self.lower(a) != Self.lower(b) { return false }
        }
        return true
    }

    public func hash(into hasher: inout Hasher) {
        for label in self.labels {
            hasher.combine(label.count)
            label.map(Self.lower).withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    /// Whether this name ends with `suffix` (label-wise, case-insensitive).
    public func hasSuffix(_ suffix: DNSName) -> Bool {
        guard suffix.labels.count <= self.labels.count else { return false }
        return DNSName(unchecked: Array(self.labels.suffix(suffix.labels.count))) == suffix
    }
}

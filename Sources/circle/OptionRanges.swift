import ArgumentParser
import CircleServer
import Foundation

/// The checks of every numeric option: a value outside its range is a usage error (exit 64)
/// that names the option, the value and the range, e.g.
/// `--port must be from 0 to 65,535 (0 picks a free port), not 99999`. Nothing is truncated or
/// clamped on the way to a socket or a limit.
enum OptionRanges {
    /// Whole seconds a command waits (`--timeout` of `send`, `tail`, `upload`, `download`).
    static let timeoutSeconds = 1...86_400
    /// Bytes per second for `upload --limit-rate` (1 TiB/s).
    static let bytesPerSecond = 1...(1 << 40)
    /// `circle ws --max-message-size`.
    static let messageBytes = 1...(1 << 30)

    /// Throws unless `range` contains `value`.
    static func check<Value: Comparable & FormattedNumber>(
        _ flag: String,
        _ value: Value,
        _ range: ClosedRange<Value>,
        unit: String = "",
        note: String = ""
    ) throws {
        guard !range.contains(value) else { return }
        throw ValidationError("\(flag) must be \(rangeDescription(range))\(unit.isEmpty ? "" : " " + unit)\(note), not \(Self.shown(value))")
    }

    /// Throws unless `value` is more than 0 and at most `upper` (for rates and seconds that may
    /// be fractional; `nan` and `inf` are refused too).
    static func checkPositive(_ flag: String, _ value: Double, atMost upper: Double, unit: String = "") throws {
        guard !(value > 0 && value <= upper) else { return }
        throw ValidationError("\(flag) must be more than 0 and at most \(upper.displayed)\(unit.isEmpty ? "" : " " + unit), not \(Self.shown(value))")
    }

    /// Throws unless `value` is at least `lower` (for counts with no useful upper bound).
    static func checkAtLeast<Value: Comparable & FormattedNumber>(_ flag: String, _ value: Value, _ lower: Value) throws {
        guard value < lower else { return }
        throw ValidationError("\(flag) must be \(lower.displayed) or more, not \(Self.shown(value))")
    }

    /// Throws when `url` names a port outside 1 to 65,535 (`ws://host:99999/` would otherwise
    /// reach port 34463).
    static func checkURLPort(_ name: String, _ url: String) throws {
        guard let port = URL(string: url)?.port, !(1...65_535).contains(port) else { return }
        throw ValidationError("\(name) \(url): the port must be from 1 to 65,535, not \(port)")
    }

    /// A value as it was most likely typed: `99999`, `-1`, `0.5`, `nan`.
    private static func shown<Value: FormattedNumber>(_ value: Value) -> String {
        if let double = value as? Double, double.isFinite, double == double.rounded(), double.magnitude < 1e15 {
            return "\(Int64(double))"
        }
        return value.description
    }
}

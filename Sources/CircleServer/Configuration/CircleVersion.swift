/// The version of this Circle build, shown by `circle --version` and in the server's
/// `circle_build_info` metric.
public enum CircleVersion {
    /// The release number (semantic versioning).
    public static let current = "0.1.0"
}

/// Where Circle's routes are mounted (`/chat`, or nothing at the root), read from the path of a
/// request that reached one of them: links and `Location`s the server makes (invites, device
/// sign-in, media) then point under the same prefix, whether it came from
/// `--path-prefix` or from the group an app mounted ``CircleServer/addRoutes(to:)`` on.
enum MountPrefix {
    /// The part of `path` before its route. Every Circle route starts with `/v1/` and none holds
    /// a second one (names and ids have no `/`), so the route starts at the path's last `/v1/`;
    /// only a request the router matched gets here, so the prefix is the mounted one.
    static func of(path: String) -> String {
        guard let route = path.range(of: "/v1/", options: .backwards) else { return "" }
        return String(path[..<route.lowerBound])
    }
}

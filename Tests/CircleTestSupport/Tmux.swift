import Foundation

/// A tmux server of a test's own (`tmux -L socket`), for the suites that drive a terminal
/// program as a person does: start a session, send keys, read the screen.
public struct Tmux: Sendable {
    public let socket: String

    public init(socket: String) {
        self.socket = socket
    }

    /// Runs `tmux -L socket arguments…` and waits for it; its standard output.
    ///
    /// Through /bin/bash with posix_spawn and waitpid, not Foundation's `Process`, which did not
    /// reap the tmux client (it daemonizes its server). Only stdin, stdout and stderr go to
    /// tmux: a tmux server daemonizes and would otherwise keep the listening sockets of servers
    /// that other suites run in this process, so a server restarted on its port would find it
    /// taken.
    @discardableResult
    public func run(_ arguments: [String]) throws -> String {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("tmux-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let quoted = (["tmux", "-L", self.socket] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let closeInherited = #"for fd in /proc/$$/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done 2>/dev/null; "#
        let command = closeInherited + quoted.joined(separator: " ") + " > '\(file)' 2>/dev/null < /dev/null"
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/bash"), strdup("-c"), strdup(command), nil]
        defer { for pointer in argv { free(pointer) } }
        guard posix_spawn(&pid, "/bin/bash", nil, nil, argv, environ) == 0 else { throw TestFailure("cannot run tmux") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
    }

    /// What pane `target` shows now.
    public func screen(_ target: String) throws -> String {
        try self.run(["capture-pane", "-p", "-t", target])
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Making sure a data directory can be used before anything is written into it, so that a
/// wrong path is one sentence that names it (``DataDirectoryError``), not the first failing
/// file operation's message.
package enum DataDirectory {
    /// Creates the directory (mode 0700) if it does not exist, and checks that this process may
    /// write in it. Its parent must exist: a typo in the path does not quietly start a new,
    /// empty server somewhere else.
    package static func prepare(_ path: String) throws(DataDirectoryError) {
        guard !path.isEmpty else { throw DataDirectoryError(.unusable, path: path, errno: ENOENT) }
        let (found, lookup) = Self.lookUp(path)
        if let mode = found {
            guard Self.isDirectory(mode) else { throw DataDirectoryError(.notADirectory, path: path) }
            try Self.checkWritable(path, for: path)
            return
        }
        switch lookup {
        case ENOENT:
            try Self.create(path)
        case ENOTDIR:
            throw DataDirectoryError(.notADirectory, path: path, culprit: Self.fileOnTheWay(to: path), errno: lookup)
        case EACCES:
            throw DataDirectoryError(.notWritable, path: path, culprit: Self.closedDirectoryOnTheWay(to: path), errno: lookup)
        default:
            throw DataDirectoryError(.unusable, path: path, errno: lookup)
        }
    }

    /// The directory that holds `path` (`.` for a bare name, `/` for a top-level one).
    static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        let parent = trimmed[..<slash]
        return parent.isEmpty ? "/" : String(parent)
    }

    private static func create(_ path: String) throws(DataDirectoryError) {
        let parent = Self.parent(of: path)
        let (found, code) = Self.lookUp(parent)
        guard let parentMode = found else {
            if code == ENOTDIR {
                throw DataDirectoryError(.notADirectory, path: path, culprit: Self.fileOnTheWay(to: parent), errno: code)
            }
            throw DataDirectoryError(.parentMissing, path: path, culprit: parent, errno: code)
        }
        guard Self.isDirectory(parentMode) else { throw DataDirectoryError(.notADirectory, path: path, culprit: parent) }
        if mkdir(path, 0o700) == 0 { return }
        let failure = errno
        switch failure {
        case EEXIST:
            // Made by another process meanwhile; or a symbolic link to nowhere.
            guard let mode = Self.mode(path) else { throw DataDirectoryError(.unusable, path: path, errno: ENOENT) }
            guard Self.isDirectory(mode) else { throw DataDirectoryError(.notADirectory, path: path) }
            try Self.checkWritable(path, for: path)
        case EACCES, EPERM:
            throw DataDirectoryError(.notWritable, path: path, culprit: parent, errno: failure)
        case EROFS:
            throw DataDirectoryError(.readOnly, path: path, culprit: parent, errno: failure)
        case ENOENT:
            throw DataDirectoryError(.parentMissing, path: path, culprit: parent, errno: failure)
        default:
            throw DataDirectoryError(.unusable, path: path, errno: failure)
        }
    }

    /// Throws unless this process may create files in `directory`.
    static func checkWritable(_ directory: String, for path: String) throws(DataDirectoryError) {
        guard access(directory, W_OK | X_OK) != 0 else { return }
        let code = errno
        switch code {
        case EROFS: throw DataDirectoryError(.readOnly, path: path, culprit: directory, errno: code)
        case EACCES, EPERM: throw DataDirectoryError(.notWritable, path: path, culprit: directory, errno: code)
        default: throw DataDirectoryError(.unusable, path: path, culprit: directory, errno: code)
        }
    }

    /// The first path on the way to `path` that exists and is not a directory.
    private static func fileOnTheWay(to path: String) -> String {
        for prefix in Self.prefixes(of: path) {
            if let mode = Self.mode(prefix), !Self.isDirectory(mode) { return prefix }
        }
        return path
    }

    /// The first directory on the way to `path` that this process may not enter.
    private static func closedDirectoryOnTheWay(to path: String) -> String {
        for prefix in Self.prefixes(of: path) where access(prefix, X_OK) != 0 {
            return prefix
        }
        return path
    }

    /// `a`, `a/b`, `a/b/c` for `a/b/c` (with the leading `/` of an absolute path).
    private static func prefixes(of path: String) -> [String] {
        let absolute = path.hasPrefix("/")
        var current = absolute ? "" : nil as String?
        var result: [String] = []
        for component in path.split(separator: "/") {
            let next = current.map { $0 + "/" + component } ?? String(component)
            result.append(next)
            current = next
        }
        return result
    }

    private static func mode(_ path: String) -> mode_t? {
        Self.lookUp(path).mode
    }

    /// The file's mode, or the error number of `stat(2)`.
    private static func lookUp(_ path: String) -> (mode: mode_t?, errno: Int32) {
        var info = stat()
        return stat(path, &info) == 0 ? (info.st_mode, 0) : (nil, errno)
    }

    private static func isDirectory(_ mode: mode_t) -> Bool {
        (mode & S_IFMT) == S_IFDIR
    }
}

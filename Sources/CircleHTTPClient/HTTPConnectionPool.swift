/// Kept-alive connections per server, so consecutive requests skip TCP and TLS setup.
package actor HTTPConnectionPool {
    private var idle: [HTTPTarget: [HTTPConnection]] = [:]
    private let maxIdlePerTarget: Int

    /// A pool that keeps at most `maxIdlePerTarget` idle connections per server.
    package init(maxIdlePerTarget: Int = 4) {
        self.maxIdlePerTarget = maxIdlePerTarget
    }

    /// An idle connection to `target` that can still be used, if there is one.
    package func take(_ target: HTTPTarget) -> HTTPConnection? {
        while var list = self.idle[target], !list.isEmpty {
            let connection = list.removeLast()
            self.idle[target] = list
            if connection.isReusable { return connection }
            connection.close()
        }
        return nil
    }

    /// Keeps a connection whose exchange is done for the next request (or closes it).
    package func give(_ connection: HTTPConnection) {
        guard connection.isReusable, self.idle[connection.target, default: []].count < self.maxIdlePerTarget else {
            connection.close()
            return
        }
        self.idle[connection.target, default: []].append(connection)
    }

    /// Closes every idle connection.
    package func closeAll() {
        for connection in self.idle.values.joined() { connection.close() }
        self.idle = [:]
    }
}

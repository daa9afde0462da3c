import CircleTestSupport
import Foundation
import Testing

#if os(Linux)
/// `circle serve` runs one event loop per CPU it may run on, its CPU affinity included (which
/// NIO's own count does not read), and `--event-loops` chooses another number.
@Suite("circle serve event loops")
struct ServeEventLoopTests {
    /// The server's threads that are loops of NIO's singleton group (named `NIO-SGLTN-…`).
    private func singletonLoops(of pid: Int32) throws -> Int {
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        return tasks.filter { task in
            let name = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)) ?? ""
            return name.hasPrefix("NIO-SGLTN-")
        }.count
    }

    /// The first CPU this test process may run on (from `Cpus_allowed_list`, e.g. "0-1" or "2,5").
    private func firstAllowedCPU() throws -> String {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") })
        let list = line.dropFirst("Cpus_allowed_list:".count).trimmingCharacters(in: .whitespaces)
        return String(try #require(list.split(whereSeparator: { $0 == "," || $0 == "-" }).first))
    }

    private func serverLoops(cpuList: String, arguments: [String] = []) async throws -> Int {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("circle-loops-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let server = ServerProcess(port: try unusedPort(), dataDirectory: data, arguments: arguments, cpuList: cpuList)
        try await server.start()
        defer { server.stop() }
        return try self.singletonLoops(of: try #require(server.pid))
    }

    @Test("pinned to one CPU (taskset), the server runs one event loop; --event-loops 3 runs three")
    func affinity() async throws {
        let cpu = try self.firstAllowedCPU()
        #expect(try await self.serverLoops(cpuList: cpu) == 1)
        #expect(try await self.serverLoops(cpuList: cpu, arguments: ["--event-loops", "3"]) == 3)
    }

    @Test("--event-loops outside 1…1024 is a usage error")
    func invalidCount() async throws {
        let process = try CircleProcess(["serve", "--event-loops", "0", "--port", "\(try unusedPort())", "--jwt-secret", testSecret])
        process.closeInput()
        #expect(try await process.waitForExit(timeout: .seconds(60)) == 64)
        #expect(process.stderr.contains("--event-loops must be from 1 to 1024"), "\(process.stderr)")
    }
}
#endif

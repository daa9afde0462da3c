import ArgumentParser

/// The `circle` command-line tool; each job is a subcommand.
@main
struct CircleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "circle",
        abstract: "Circle: a self-hostable realtime chat system.",
        subcommands: [ServeCommand.self, TokenCommand.self, ChatCommand.self, SendCommand.self, TailCommand.self, CirclesCommand.self, UploadCommand.self, DownloadCommand.self, WSCommand.self, BenchCommand.self, DiscoverCommand.self]
    )
}

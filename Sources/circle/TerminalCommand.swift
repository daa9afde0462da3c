import CircleSocket

/// What a line typed into `circle ws` asks for. Parsing is pure; the session performs the result.
enum TerminalCommand: Equatable {
    /// Send this text message.
    case send(String)
    /// Send this binary message.
    case sendBinary([UInt8])
    /// Ping and print the round-trip time.
    case ping
    /// Start the close handshake with this code and reason.
    case close(WebSocketCloseCode, reason: String)
    /// Close with 1000 and exit.
    case quit
    /// Print the list of commands.
    case help
    /// The line was a command that could not be understood; tell the user why.
    case invalid(String)

    /// The commands as shown by `/help` and in `circle ws --help`.
    static let summary = """
        /ping                   ping and print the round-trip time
        /close [CODE [REASON]]  close (default code 1000); exit when closed
        /binary HEX             send binary, e.g. /binary 0001ff (spaces allowed)
        /quit                   close with 1000 and exit
        /help                   list these commands
        //TEXT                  send "/TEXT" as text
        """

    /// Parses one line of input: a slash command, or else a text message to send as is.
    init(line: String) {
        guard line.hasPrefix("/") else {
            self = .send(line)
            return
        }
        if line.hasPrefix("//") {
            self = .send(String(line.dropFirst()))
            return
        }
        let body = line.dropFirst()
        let name = body.prefix { $0 != " " }
        let argument = body.dropFirst(name.count).drop { $0 == " " }
        switch name {
        case "ping":
            self = argument.isEmpty ? .ping : .invalid("/ping takes no arguments")
        case "quit", "exit":
            self = .quit
        case "help", "?":
            self = .help
        case "close":
            self = Self.parseClose(argument)
        case "binary":
            if let bytes = Self.parseHex(argument) {
                self = .sendBinary(bytes)
            } else {
                self = .invalid("/binary needs hex digits in pairs, e.g. /binary 0001ff")
            }
        default:
            self = .invalid("unknown command /\(name); type /help for the list, or //TEXT to send text starting with /")
        }
    }

    private static func parseClose(_ argument: Substring) -> TerminalCommand {
        guard !argument.isEmpty else { return .close(.normalClosure, reason: "") }
        let codeText = argument.prefix { $0 != " " }
        let reason = argument.dropFirst(codeText.count).drop { $0 == " " }
        guard let raw = UInt16(codeText), WebSocketCloseCode(raw).isSendable else {
            return .invalid("/close needs a code that may be sent: 1000-1003, 1007-1014 or 3000-4999")
        }
        guard reason.utf8.count <= 123 else {
            return .invalid("the close reason may be at most 123 bytes of UTF-8")
        }
        return .close(WebSocketCloseCode(raw), reason: String(reason))
    }

    /// Hex digits in pairs, optionally separated by spaces and prefixed `0x`; `nil` if malformed.
    static func parseHex(_ text: Substring) -> [UInt8]? {
        var digits = text.filter { $0 != " " }
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") { digits.removeFirst(2) }
        guard digits.count % 2 == 0, digits.allSatisfy(\.isHexDigit) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            guard let byte = UInt8(digits[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }
}

import CircleSocket
import HTTPTypes
import HummingbirdCore
import NIOHTTP1
import NIOHTTPTypesHTTP1

/// Everything the server derives from a request head before a route handler runs, in one call,
/// for the fuzzer (`Sources/CircleFuzz`): the head as Hummingbird receives it (the HTTP/1
/// conversion ``CircleHTTPChannel`` uses), the path and query as the router reads them, the
/// metrics label, the bearer token, the offered WebSocket extensions and subprotocols. It must
/// never trap.
package enum HTTPHeadInspection {
    package static func inspect(_ head: HTTPRequestHead) -> Int {
        var checksum = 0
        if let request = try? HTTPRequest(head, secure: false, splitCookie: false) {
            checksum += request.headerFields.count
            let uri = URI(request.path ?? "")
            checksum += uri.path.utf8.count + uri.queryParameters.count
            checksum += RouteMetricsMiddleware<BasicCircleRequestContext>.label(request.method, uri.path).utf8.count
        }
        let uri = URI(head.uri)
        checksum += bearerToken(authorization: head.headers.first(name: "Authorization"), uri: uri)?.utf8.count ?? 0
        if PerMessageDeflateNegotiation.respond(toOffers: head.headers["Sec-WebSocket-Extensions"]) != nil { checksum += 1 }
        checksum += head.headers["Sec-WebSocket-Protocol"].flatMap { $0.split(separator: ",") }.count
        return checksum
    }
}

import CircleSocket
import NIOHTTP1

/// Everything the server derives from a request head before any handler runs, in one call, for
/// the fuzzer (`Sources/CircleFuzz`): the path and query, the route label, the bearer token,
/// the media route, the offered WebSocket extensions and subprotocols. It must never trap.
package enum HTTPHeadInspection {
    package static func inspect(_ head: HTTPRequestHead) -> Int {
        let request = APIRequest(head: head, body: nil)
        var checksum = request.path.utf8.count + request.query.count
        checksum += APIRouter.routeLabel(method: head.method, path: request.path).utf8.count
        checksum += request.token?.utf8.count ?? 0
        if MediaService.Route(method: head.method, path: request.path) != nil { checksum += 1 }
        if PerMessageDeflateNegotiation.respond(toOffers: head.headers["Sec-WebSocket-Extensions"]) != nil { checksum += 1 }
        checksum += head.headers["Sec-WebSocket-Protocol"].flatMap { $0.split(separator: ",") }.count
        return checksum
    }
}

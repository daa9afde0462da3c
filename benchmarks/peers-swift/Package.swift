// swift-tools-version: 6.0
// Peer echo servers for ../echo.py: the same job as Circle's /v1/echo, written with the two
// Swift server frameworks people would pick instead. A separate package so that Circle itself
// does not depend on them. Build: swift build -c release (from this folder).
import PackageDescription

let package = Package(
    name: "CirclePeers",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
    ],
    targets: [
        .executableTarget(
            name: "hummingbird-echo",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            ]
        ),
        .executableTarget(
            name: "vapor-echo",
            dependencies: [.product(name: "Vapor", package: "vapor")]
        ),
    ]
)

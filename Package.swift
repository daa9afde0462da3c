// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Circle",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "CircleWire", targets: ["CircleWire"]),
        .library(name: "CircleSocket", targets: ["CircleSocket"]),
        .library(name: "CircleClient", targets: ["CircleClient"]),
        .library(name: "CircleServer", targets: ["CircleServer"]),
        .library(name: "CircleDiscovery", targets: ["CircleDiscovery"]),
        .executable(name: "circle", targets: ["circle"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
    ],
    targets: [
        .target(name: "CircleWire"),
        .target(
            name: "CircleSocket",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ]
        ),
        .target(
            name: "CircleClient",
            dependencies: ["CircleSocket", "CircleWire", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "CircleServer",
            dependencies: ["CircleWire", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "CircleDiscovery",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "circle",
            dependencies: [
                "CircleSocket",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "circle-autobahn",
            dependencies: ["CircleSocket", .product(name: "Logging", package: "swift-log")],
            path: "Sources/CircleAutobahn"
        ),
        .testTarget(
            name: "CircleSocketTests",
            dependencies: [
                "CircleSocket",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ]
        ),
    ]
)

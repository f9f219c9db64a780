// MiniRTSwift: a small Swift layer over minirt's C API (module `MiniRT`).
//
//     import MiniRTSwift
//     let session = try MiniRTSession(contentsOf: Bundle.main.url(forResource: "mobilenet", withExtension: "mrt")!)
//     let probs = try session.run([pixels])[0]      // [[Float]] in, [[Float]] out
//     // two threads per run (the default is one, the calling thread):
//     let fast = try MiniRTSession(contentsOf: url, options: MiniRTSessionOptions(intraOpNumThreads: 2))
//
// A session is not thread-safe: use one per thread, or serialise calls.
// Shipped by minibuild (packaging/ios/MiniRT.swift); not generated, no build-specific content.

import Foundation
import MiniRT

/// A failed minirt call: the status name (`INVALID_MODEL`, ...) and minirt's message.
public struct MiniRTError: Error, CustomStringConvertible {
    public let code: Int
    public let status: String
    public let message: String

    init(_ status: mrt_status, _ message: String) {
        self.code = Int(status.rawValue)
        self.status = String(cString: mrt_status_string(status))
        self.message = message
    }

    public var description: String { "[\(status)] \(message)" }
}

/// Name, element type and static shape of a model input or output.
public struct MiniRTTensorInfo {
    public let name: String
    /// ONNX TensorProto data type (1 = float32, 7 = int64, ...).
    public let dataType: Int
    public let shape: [Int]
    public let byteCount: Int

    public var isFloat32: Bool { dataType == 1 }
}

public enum MiniRT {
    /// "major.minor.patch" of the runtime.
    public static var version: String { String(cString: mrt_version()) }
    /// Hash of the manifest (model set) this library was built for.
    public static var manifestHash: String { String(cString: mrt_build_manifest_hash()) }
}

/// Session options (onnxruntime's SessionOptions, the fields minirt has).
public struct MiniRTSessionOptions {
    /// Threads one run uses, the calling thread included; 0 or 1 (the default):
    /// the caller's thread only. A library built with --no-threads always uses one.
    public var intraOpNumThreads: Int

    public init(intraOpNumThreads: Int = 0) {
        self.intraOpNumThreads = intraOpNumThreads
    }
}

public final class MiniRTSession {
    private let handle: OpaquePointer
    public let inputs: [MiniRTTensorInfo]
    public let outputs: [MiniRTTensorInfo]

    /// Load a converted model (.mrt) from its bytes; the bytes are copied.
    public init(data: Data, options: MiniRTSessionOptions = MiniRTSessionOptions()) throws {
        var err = [CChar](repeating: 0, count: 512)
        let errSize = err.count
        var h: OpaquePointer? = nil
        var opts = mrt_session_options()
        opts.intra_op_num_threads = Int32(clamping: options.intraOpNumThreads)
        let status: mrt_status = data.withUnsafeBytes { raw in
            mrt_session_create_with_options(raw.baseAddress, raw.count, &opts, &h, &err, errSize)
        }
        guard status.rawValue == 0, let created = h else {
            throw MiniRTError(status, String(cString: err))
        }
        handle = created
        inputs = try MiniRTSession.infos(created, count: mrt_session_input_count(created), mrt_session_input_info)
        outputs = try MiniRTSession.infos(created, count: mrt_session_output_count(created), mrt_session_output_info)
    }

    /// Load a converted model (.mrt) from a file.
    public convenience init(contentsOf url: URL, options: MiniRTSessionOptions = MiniRTSessionOptions()) throws {
        try self.init(data: try Data(contentsOf: url), options: options)
    }

    deinit {
        mrt_session_destroy(handle)
    }

    private static func infos(_ h: OpaquePointer, count: Int,
                              _ get: (OpaquePointer?, Int, UnsafeMutablePointer<mrt_tensor_info>?) -> mrt_status)
        throws -> [MiniRTTensorInfo] {
        var out: [MiniRTTensorInfo] = []
        for i in 0..<count {
            var info = mrt_tensor_info()
            let status = get(h, i, &info)
            guard status.rawValue == 0 else {
                throw MiniRTError(status, String(cString: mrt_session_last_error(h)))
            }
            let dims: [Int64] = withUnsafeBytes(of: info.dims) { Array($0.bindMemory(to: Int64.self)) }
            out.append(MiniRTTensorInfo(name: String(cString: info.name),
                                        dataType: Int(info.dtype.rawValue),
                                        shape: dims.prefix(Int(info.ndim)).map { Int($0) },
                                        byteCount: Int(info.nbytes)))
        }
        return out
    }

    private func check(_ status: mrt_status) throws {
        guard status.rawValue != 0 else { return }
        throw MiniRTError(status, String(cString: mrt_session_last_error(handle)))
    }

    /// Copy raw bytes (exactly `inputs[index].byteCount`) into input `index`.
    public func setInput(_ index: Int, bytes: UnsafeRawBufferPointer) throws {
        try check(mrt_session_set_input(handle, index, bytes.baseAddress, bytes.count))
    }

    /// Run the model on the current inputs.
    public func run() throws {
        try check(mrt_session_run(handle))
    }

    /// The bytes of output `index` after `run()`.
    public func output(_ index: Int) throws -> Data {
        var data = Data(count: outputs[index].byteCount)
        try data.withUnsafeMutableBytes { raw in
            try check(mrt_session_get_output(handle, index, raw.baseAddress, raw.count))
        }
        return data
    }

    /// Float32 convenience: one flat array per input, in model order; returns one
    /// flat array per output. Shapes are in `inputs` / `outputs`.
    public func run(_ feeds: [[Float]]) throws -> [[Float]] {
        guard feeds.count == inputs.count else {
            throw MiniRTError(MRT_STATUS_INVALID_ARGUMENT, "the model takes \(inputs.count) input(s), got \(feeds.count)")
        }
        for (i, x) in feeds.enumerated() {
            let want = inputs[i]
            guard want.isFloat32, x.count * MemoryLayout<Float>.size == want.byteCount else {
                throw MiniRTError(MRT_STATUS_INVALID_ARGUMENT,
                                  "input '\(want.name)' takes \(want.byteCount) bytes of type \(want.dataType), shape \(want.shape)")
            }
            try x.withUnsafeBytes { try setInput(i, bytes: $0) }
        }
        try run()
        var results: [[Float]] = []
        for (i, o) in outputs.enumerated() {
            guard o.isFloat32 else {
                throw MiniRTError(MRT_STATUS_INVALID_ARGUMENT, "output '\(o.name)' is not float32; use output(_:)")
            }
            var y = [Float](repeating: 0, count: o.byteCount / MemoryLayout<Float>.size)
            try y.withUnsafeMutableBytes { raw in
                try check(mrt_session_get_output(handle, i, raw.baseAddress, raw.count))
            }
            results.append(y)
        }
        return results
    }
}

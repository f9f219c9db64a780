package ai.minibuild.minirt;

/**
 * Element type of a model input or output. The codes are ONNX's
 * {@code TensorProto.DataType} values, as in minirt's C API.
 */
public enum DataType {
// BEGIN generated element types (from minibuild/dtypes.py by `python -m minibuild.dtypes`; do not edit)
    /** A type this version of the Java API does not know. */
    UNKNOWN(0, 0),
    FLOAT32(1, 4),
    UINT8(2, 1),
    INT8(3, 1),
    UINT16(4, 2),
    INT16(5, 2),
    INT32(6, 4),
    INT64(7, 8),
    BOOL(9, 1),
    FLOAT16(10, 2),
    FLOAT64(11, 8),
    UINT32(12, 4),
    UINT64(13, 8);
// END generated element types

    private final int code;
    private final int size;

    DataType(int code, int size) {
        this.code = code;
        this.size = size;
    }

    /** The ONNX {@code TensorProto.DataType} value. */
    public int code() {
        return code;
    }

    /** Bytes per element. */
    public int byteSize() {
        return size;
    }

    /** The type with this ONNX code, or {@link #UNKNOWN}. */
    public static DataType fromCode(int code) {
        for (DataType t : values()) {
            if (t.code == code) {
                return t;
            }
        }
        return UNKNOWN;
    }
}

package ai.minibuild.minirt;

import java.util.Arrays;

/**
 * Name, element type and shape of a model input or output. Shapes are static:
 * minibuild fixes them when it converts the model.
 */
public final class TensorInfo {
    private final int index;
    private final String name;
    private final DataType dataType;
    private final long[] shape;
    private final int byteSize;

    TensorInfo(int index, String name, DataType dataType, long[] shape, int byteSize) {
        this.index = index;
        this.name = name;
        this.dataType = dataType;
        this.shape = shape;
        this.byteSize = byteSize;
    }

    /** Position among the model's inputs (or outputs). */
    public int getIndex() {
        return index;
    }

    public String getName() {
        return name;
    }

    public DataType getDataType() {
        return dataType;
    }

    /** The dimensions, outermost first (a copy). */
    public long[] getShape() {
        return shape.clone();
    }

    /** Number of elements: the product of the dimensions. */
    public int getElementCount() {
        long n = 1;
        for (long d : shape) {
            n *= d;
        }
        return (int) n;
    }

    /** Size of the tensor's data in bytes. */
    public int getByteSize() {
        return byteSize;
    }

    @Override
    public String toString() {
        return name + ": " + dataType + Arrays.toString(shape);
    }
}

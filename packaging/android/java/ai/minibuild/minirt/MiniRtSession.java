package ai.minibuild.minirt;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * A loaded model, ready to run: the Java face of minirt, the runtime minibuild
 * builds for exactly your models.
 *
 * <pre>{@code
 * try (MiniRtSession session = MiniRtSession.fromFile(modelPath)) {
 *     float[] probs = session.run(pixels);           // one input, one output
 * }
 * }</pre>
 *
 * <p>Inputs can be given as arrays (copied once, straight into the session), as
 * direct {@link ByteBuffer}s (copied natively, no JNI array pinning), or written
 * in place with {@link #getInputBuffer(int)} (no copy at all). Outputs likewise:
 * {@link #getOutputFloats(int)}, {@link #getOutput(int, ByteBuffer)} or the
 * zero-copy {@link #getOutputBuffer(int)}. Buffers use the platform's byte order
 * ({@link ByteOrder#nativeOrder()}, little-endian on every Android ABI).
 *
 * <p>A session is not meant to be shared between threads: use one per thread
 * (calls are synchronized, so sharing is safe but serial). Close it to free its
 * native memory; buffers obtained from it become invalid then.
 *
 * <p>Failures throw {@link MiniRtException} with minirt's status and message;
 * arguments Java can check (sizes, indices, names, types) throw
 * {@link IllegalArgumentException} first.
 */
public final class MiniRtSession implements AutoCloseable {
    /** System property naming the native library file to load instead of {@code libminirt.so}. */
    public static final String LIBRARY_PROPERTY = "ai.minibuild.minirt.library";

    static {
        String path = System.getProperty(LIBRARY_PROPERTY);
        if (path != null && !path.isEmpty()) {
            System.load(path);
        } else {
            System.loadLibrary("minirt");
        }
    }

    private long handle;
    private final ByteBuffer model; // kept alive: the runtime may read weights from it in place
    private final List<TensorInfo> inputs;
    private final List<TensorInfo> outputs;

    private MiniRtSession(long handle, ByteBuffer model) {
        this.handle = handle;
        this.model = model;
        try {
            this.inputs = describe(false);
            this.outputs = describe(true);
        } catch (RuntimeException e) {
            nativeDestroy(handle);
            this.handle = 0;
            throw e;
        }
    }

    /**
     * Session options, in the spirit of onnxruntime's {@code SessionOptions}:
     * {@code MiniRtSession.fromFile(path, new MiniRtSession.Options().setIntraOpNumThreads(2))}.
     */
    public static final class Options {
        int intraOpNumThreads;

        /**
         * Threads one {@link MiniRtSession#run()} uses, the calling thread included.
         * 0 or 1 (the default): the caller's thread only. A library built with
         * {@code --no-threads} always uses one.
         */
        public Options setIntraOpNumThreads(int threads) {
            if (threads < 0 || threads > 64) {
                throw new IllegalArgumentException("intraOpNumThreads must be 0..64, got " + threads);
            }
            intraOpNumThreads = threads;
            return this;
        }

        public int getIntraOpNumThreads() {
            return intraOpNumThreads;
        }
    }

    private static int threads(Options options) {
        return options == null ? 0 : options.intraOpNumThreads;
    }

    /** Loads a converted model ({@code .mrt}) from a file. */
    public static MiniRtSession fromFile(String path) {
        return fromFile(path, null);
    }

    /**
     * Loads a converted model ({@code .mrt}) from a file, with options. The file is
     * memory-mapped and its weights used in place (no copy, clean pages the system
     * can reclaim): it must not change while the session is open.
     */
    public static MiniRtSession fromFile(String path, Options options) {
        if (path == null) {
            throw new IllegalArgumentException("path is null");
        }
        ByteBuffer mapped;
        try {
            java.io.RandomAccessFile f = new java.io.RandomAccessFile(path, "r");
            try {
                mapped = f.getChannel().map(java.nio.channels.FileChannel.MapMode.READ_ONLY, 0, f.length());
            } finally {
                f.close(); // the mapping outlives the channel
            }
        } catch (java.io.IOException e) {
            throw new MiniRtException(5, "IO_ERROR", "cannot open '" + path + "'");
        }
        return fromByteBuffer(mapped, options);
    }

    /** Loads a converted model ({@code .mrt}) from a file. */
    public static MiniRtSession fromFile(File file) {
        return fromFile(file.getPath());
    }

    /** Loads a model from its bytes; the session keeps its own copy. */
    public static MiniRtSession fromBytes(byte[] model) {
        return fromBytes(model, null);
    }

    /** Loads a model from its bytes, with options; the session keeps its own copy. */
    public static MiniRtSession fromBytes(byte[] model, Options options) {
        if (model == null) {
            throw new IllegalArgumentException("model is null");
        }
        return new MiniRtSession(nativeCreateFromArray(model, 0, model.length, threads(options)), null);
    }

    /**
     * Loads a model from the buffer's remaining bytes. A direct buffer whose data
     * is 64-byte aligned, such as a memory-mapped file ({@code FileChannel.map}, or an
     * uncompressed asset), is used in place: weights are not copied, and the buffer
     * must not be changed while the session is open. Other buffers are copied.
     */
    public static MiniRtSession fromByteBuffer(ByteBuffer model) {
        return fromByteBuffer(model, null);
    }

    /** {@link #fromByteBuffer(ByteBuffer)} with options. */
    public static MiniRtSession fromByteBuffer(ByteBuffer model, Options options) {
        if (model == null) {
            throw new IllegalArgumentException("model is null");
        }
        if (model.isDirect()) {
            return new MiniRtSession(nativeCreateFromDirect(model, model.position(), model.remaining(),
                    threads(options)), model);
        }
        byte[] bytes;
        int offset;
        if (model.hasArray()) {
            bytes = model.array();
            offset = model.arrayOffset() + model.position();
        } else {
            bytes = new byte[model.remaining()];
            model.duplicate().get(bytes);
            offset = 0;
        }
        return new MiniRtSession(nativeCreateFromArray(bytes, offset, model.remaining(), threads(options)), null);
    }

    /** The runtime's version, "major.minor.patch". */
    public static String version() {
        return nativeVersion();
    }

    /** The hash of the model set (manifest) this library was built for. */
    public static String manifestHash() {
        return nativeManifestHash();
    }

    private List<TensorInfo> describe(boolean output) {
        int n = nativeCount(handle, output);
        List<TensorInfo> list = new ArrayList<TensorInfo>(n);
        for (int i = 0; i < n; i++) {
            long[] v = nativeInfo(handle, output, i);
            long[] shape = new long[(int) v[2]];
            System.arraycopy(v, 3, shape, 0, shape.length);
            list.add(new TensorInfo(i, nativeName(handle, output, i), DataType.fromCode((int) v[0]), shape,
                    (int) v[1]));
        }
        return Collections.unmodifiableList(list);
    }

    /** The model's inputs, in order. */
    public List<TensorInfo> getInputs() {
        return inputs;
    }

    /** The model's outputs, in order. */
    public List<TensorInfo> getOutputs() {
        return outputs;
    }

    /** Index of the input called {@code name}. */
    public int getInputIndex(String name) {
        return indexOf(inputs, name, "input");
    }

    /** Index of the output called {@code name}. */
    public int getOutputIndex(String name) {
        return indexOf(outputs, name, "output");
    }

    private static int indexOf(List<TensorInfo> list, String name, String what) {
        for (TensorInfo t : list) {
            if (t.getName().equals(name)) {
                return t.getIndex();
            }
        }
        List<String> names = new ArrayList<String>();
        for (TensorInfo t : list) {
            names.add(t.getName());
        }
        throw new IllegalArgumentException("the model has no " + what + " '" + name + "'; it has " + names);
    }

    private long live() {
        if (handle == 0) {
            throw new IllegalStateException("the session is closed");
        }
        return handle;
    }

    private static TensorInfo at(List<TensorInfo> list, int index, String what) {
        if (index < 0 || index >= list.size()) {
            throw new IndexOutOfBoundsException(what + " index " + index + " out of range: the model has "
                    + list.size() + " " + what + "(s)");
        }
        return list.get(index);
    }

    private static void checkSize(TensorInfo t, long bytes, String what) {
        if (bytes != t.getByteSize()) {
            throw new IllegalArgumentException(what + " '" + t.getName() + "' (" + t + ") takes "
                    + t.getByteSize() + " bytes, got " + bytes);
        }
    }

    /** {@code dst} can take output {@code t} at its position: writable, with room for it. */
    private static void checkDestination(TensorInfo t, ByteBuffer dst) {
        if (dst.isReadOnly()) {
            throw new IllegalArgumentException("the buffer for output '" + t.getName() + "' is read-only");
        }
        if (dst.remaining() < t.getByteSize()) {
            throw new IllegalArgumentException("output '" + t.getName() + "' needs " + t.getByteSize()
                    + " bytes, the buffer has " + dst.remaining() + " remaining");
        }
    }

    private static void checkType(TensorInfo t, DataType type, String what) {
        if (t.getDataType() != type) {
            throw new IllegalArgumentException(what + " '" + t.getName() + "' is " + t.getDataType()
                    + ", not " + type);
        }
    }

    // ------------------------------------------------------------------ inputs

    /** Copies the buffer's remaining bytes (exactly the input's size) into input {@code index}. */
    public synchronized void setInput(int index, ByteBuffer data) {
        TensorInfo t = at(inputs, index, "input");
        checkSize(t, data.remaining(), "input");
        if (data.isDirect()) {
            nativeSetInputDirect(live(), index, data, data.position(), data.remaining());
        } else if (data.hasArray()) {
            nativeSetInputArray(live(), index, data.array(), data.arrayOffset() + data.position(),
                    data.remaining(), 1);
        } else {
            byte[] copy = new byte[data.remaining()];
            data.duplicate().get(copy);
            nativeSetInputArray(live(), index, copy, 0, copy.length, 1);
        }
    }

    /** Sets a FLOAT32 input. */
    public synchronized void setInput(int index, float[] data) {
        setTypedInput(index, data, data.length, DataType.FLOAT32);
    }

    /** Sets an INT32 input. */
    public synchronized void setInput(int index, int[] data) {
        setTypedInput(index, data, data.length, DataType.INT32);
    }

    /** Sets an INT64 input. */
    public synchronized void setInput(int index, long[] data) {
        setTypedInput(index, data, data.length, DataType.INT64);
    }

    /** A primitive array of `length` elements of `type` into input `index`. */
    private void setTypedInput(int index, Object data, int length, DataType type) {
        TensorInfo t = at(inputs, index, "input");
        checkType(t, type, "input");
        checkSize(t, (long) type.byteSize() * length, "input");
        nativeSetInputArray(live(), index, data, 0, type.byteSize() * length, type.byteSize());
    }

    /** Sets an input from its raw bytes (any element type, native byte order). */
    public synchronized void setInput(int index, byte[] data) {
        TensorInfo t = at(inputs, index, "input");
        checkSize(t, data.length, "input");
        nativeSetInputArray(live(), index, data, 0, data.length, 1);
    }

    public void setInput(String name, ByteBuffer data) {
        setInput(getInputIndex(name), data);
    }

    public void setInput(String name, float[] data) {
        setInput(getInputIndex(name), data);
    }

    /**
     * The session's own memory for input {@code index}, as a direct buffer in native
     * byte order: write the input here and call {@link #run()}, nothing is copied.
     * Valid until the session is closed.
     */
    public synchronized ByteBuffer getInputBuffer(int index) {
        at(inputs, index, "input");
        return nativeInputBuffer(live(), index).order(ByteOrder.nativeOrder());
    }

    // ------------------------------------------------------------------ run

    /** Runs the model on the current inputs. */
    public synchronized void run() {
        nativeRun(live());
    }

    /**
     * One run on the caller's buffers. {@code inputs[i]} holds input {@code i}: its
     * remaining bytes, exactly the input's size, in native byte order. A direct buffer
     * is read where it lies (nothing is copied in, as {@link #getInputBuffer} gives
     * without the extra buffer); a heap buffer is copied in first. Input buffers'
     * positions do not move. {@code outputs[k]} receives output {@code k} at its
     * position, which advances as with {@link #getOutput(int, ByteBuffer)}; a null
     * {@code outputs}, or a null {@code outputs[k]}, leaves that output in the session
     * for {@link #getOutputBuffer} and {@link #getOutput}.
     */
    public synchronized void run(ByteBuffer[] inputs, ByteBuffer[] outputs) {
        if (inputs == null || inputs.length != this.inputs.size()) {
            throw new IllegalArgumentException("the model has " + this.inputs.size() + " input(s) " + this.inputs
                    + ", got " + (inputs == null ? "null" : inputs.length + " buffer(s)"));
        }
        if (outputs != null && outputs.length != this.outputs.size()) {
            throw new IllegalArgumentException("the model has " + this.outputs.size() + " output(s) " + this.outputs
                    + ", got " + outputs.length + " buffer(s)");
        }
        long h = live();
        int n = this.outputs.size();
        ByteBuffer[] direct = new ByteBuffer[inputs.length + n]; // the inputs, then the outputs
        int[] pos = new int[inputs.length + n];
        for (int i = 0; i < inputs.length; i++) {
            ByteBuffer b = inputs[i];
            if (b == null) {
                throw new NullPointerException("input " + i + " ('" + this.inputs.get(i).getName() + "') is null");
            }
            checkSize(this.inputs.get(i), b.remaining(), "input");
            if (b.isDirect()) {
                direct[i] = b;
                pos[i] = b.position();
            } else {
                setInput(i, b); // null below: the run reads the copy in the session
            }
        }
        for (int k = 0; outputs != null && k < n; k++) {
            ByteBuffer o = outputs[k];
            if (o == null) {
                continue;
            }
            checkDestination(this.outputs.get(k), o);
            if (o.isDirect()) {
                direct[inputs.length + k] = o;
                pos[inputs.length + k] = o.position();
            }
        }
        nativeRunWith(h, direct, pos);
        for (int k = 0; outputs != null && k < n; k++) {
            ByteBuffer o = outputs[k];
            if (o == null) {
                continue;
            }
            if (o.isDirect()) {
                o.position(o.position() + this.outputs.get(k).getByteSize());
            } else {
                getOutput(k, o); // a heap buffer: copied out of the session
            }
        }
    }

    /**
     * Convenience for the common one-input, one-output FLOAT32 model: sets the input,
     * runs, returns the output.
     */
    public synchronized float[] run(float[] input) {
        if (inputs.size() != 1 || outputs.size() != 1) {
            throw new IllegalStateException("run(float[]) needs a model with one input and one output; this one has "
                    + inputs + " -> " + outputs + ": use setInput/run()/getOutput");
        }
        setInput(0, input);
        run();
        return getOutputFloats(0);
    }

    // ------------------------------------------------------------------ outputs

    /** A new array with FLOAT32 output {@code index} (after {@link #run()}). */
    public synchronized float[] getOutputFloats(int index) {
        TensorInfo t = at(outputs, index, "output");
        checkType(t, DataType.FLOAT32, "output");
        float[] out = new float[t.getByteSize() / 4];
        nativeGetOutputArray(live(), index, out, 0, t.getByteSize(), 4);
        return out;
    }

    /** Copies FLOAT32 output {@code index} into {@code dst} (whose length must match). */
    public synchronized void getOutput(int index, float[] dst) {
        TensorInfo t = at(outputs, index, "output");
        checkType(t, DataType.FLOAT32, "output");
        checkSize(t, 4L * dst.length, "output");
        nativeGetOutputArray(live(), index, dst, 0, t.getByteSize(), 4);
    }

    /** Copies output {@code index}'s bytes into {@code dst} at its position, which advances. */
    public synchronized void getOutput(int index, ByteBuffer dst) {
        TensorInfo t = at(outputs, index, "output");
        checkDestination(t, dst);
        if (dst.isDirect()) {
            nativeGetOutputDirect(live(), index, dst, dst.position(), t.getByteSize());
        } else if (dst.hasArray()) {
            nativeGetOutputArray(live(), index, dst.array(), dst.arrayOffset() + dst.position(), t.getByteSize(), 1);
        } else {
            byte[] copy = new byte[t.getByteSize()];
            nativeGetOutputArray(live(), index, copy, 0, copy.length, 1);
            dst.duplicate().put(copy);
        }
        dst.position(dst.position() + t.getByteSize());
    }

    /**
     * Output {@code index} in place, read-only, native byte order: no copy. Valid until
     * the next {@link #run()} or {@link #close()}.
     */
    public synchronized ByteBuffer getOutputBuffer(int index) {
        at(outputs, index, "output");
        return nativeOutputBuffer(live(), index).asReadOnlyBuffer().order(ByteOrder.nativeOrder());
    }

    /** Frees the session's native memory. Idempotent. */
    @Override
    public synchronized void close() {
        if (handle != 0) {
            nativeDestroy(handle);
            handle = 0;
        }
    }

    /** True once {@link #close()} ran. */
    public synchronized boolean isClosed() {
        return handle == 0;
    }

    // The JNI glue (packaging/android/jni/minirt_jni.c); proguard.txt keeps these names.

    private static native long nativeCreateFromArray(byte[] data, int offset, int length, int threads);

    private static native long nativeCreateFromDirect(ByteBuffer data, int position, int length, int threads);

    private static native void nativeDestroy(long handle);

    private static native int nativeCount(long handle, boolean output);

    private static native long[] nativeInfo(long handle, boolean output, int index);

    private static native String nativeName(long handle, boolean output, int index);

    private static native void nativeSetInputDirect(long handle, int index, ByteBuffer data, int position,
            int length);

    private static native void nativeSetInputArray(long handle, int index, Object array, int byteOffset,
            int byteLength, int elementSize);

    private static native ByteBuffer nativeInputBuffer(long handle, int index);

    private static native void nativeRun(long handle);

    private static native void nativeRunWith(long handle, ByteBuffer[] buffers, int[] positions);

    private static native void nativeGetOutputDirect(long handle, int index, ByteBuffer data, int position,
            int length);

    private static native void nativeGetOutputArray(long handle, int index, Object array, int byteOffset,
            int byteLength, int elementSize);

    private static native ByteBuffer nativeOutputBuffer(long handle, int index);

    private static native String nativeVersion();

    private static native String nativeManifestHash();
}

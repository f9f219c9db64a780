package ai.minibuild.minirt;

/**
 * A minirt call failed. Carries the runtime's status and its own message, e.g.
 * {@code [INVALID_MODEL] bad magic: not a minirt model file}.
 *
 * <p>Unchecked, like {@link IllegalArgumentException}: a model that loads and
 * runs once keeps running; failures are programming or packaging errors (a wrong
 * file, a library built for another model set).
 */
public class MiniRtException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** What went wrong, as minirt's {@code mrt_status}. */
    public enum Status {
        OK, INVALID_ARGUMENT, INVALID_MODEL, UNSUPPORTED, OUT_OF_MEMORY, IO_ERROR, UNKNOWN;

        static Status fromCode(int code) {
            Status[] all = values();
            return code >= 0 && code < all.length - 1 ? all[code] : UNKNOWN;
        }
    }

    private final int statusCode;

    /** Called by the JNI glue (keep this constructor: see proguard.txt). */
    public MiniRtException(int statusCode, String statusName, String message) {
        super("[" + statusName + "] " + message);
        this.statusCode = statusCode;
    }

    public Status getStatus() {
        return Status.fromCode(statusCode);
    }

    /** The numeric {@code mrt_status} value. */
    public int getStatusCode() {
        return statusCode;
    }
}

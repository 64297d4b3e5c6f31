package dev.deployc;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * A deployc bundle opened for execution through the native runtime (libdeployc_jni: the C++ library the
 * deployc-runner is built from, over ExecuTorch). Opening checks every file against bundle's lock (or, with
 * {@link Check#SIZES}, their sizes: for later starts of an app that checked the bundle once); the first
 * {@link #run} loads the pipeline's programs. Calls on one bundle are serialised; {@link #cancel} may come from
 * any thread. {@link #close} frees the native side; a closed bundle refuses further calls.
 *
 * <pre>{@code
 * try (Bundle bundle = Bundle.open("/data/user/0/app/files/rag-offline")) {
 *     Result r = bundle.run(new Inputs().text("query", "How do honeybees find flowers?"),
 *                           piece -> { ui.append(piece); return true; });
 *     String answer = r.text("answer");
 * }
 * }</pre>
 */
public final class Bundle implements AutoCloseable {
    /** How much {@link #open} checks: every file's sha256, or only that every file is there at its size. */
    public enum Check { FULL, SIZES }

    /** A pipeline input: its name and type (text, image or audio). */
    public static final class Port {
        public final String name;
        public final String type;

        Port(String name, String type) {
            this.name = name;
            this.type = type;
        }

        @Override
        public String toString() {
            return name + ": " + type;
        }
    }

    /** A program of the bundle as its runtime config declares it. */
    public static final class Program {
        public final String name;
        public final String file;
        public final String backend;
        public final String quantization;
        /** What the build's verification concluded: passed, not-run (with the reason in the report), ... */
        public final String verification;
        public final long sizeBytes;
        public final List<String> methods;

        Program(Map<String, Object> p) {
            name = (String) p.get("name");
            file = (String) p.get("file");
            backend = (String) p.get("backend");
            quantization = (String) p.get("quantization");
            verification = (String) p.get("verification");
            sizeBytes = ((Number) p.get("size_bytes")).longValue();
            List<String> m = new ArrayList<>();
            for (Object o : (List<?>) p.get("methods")) {
                m.add((String) o);
            }
            methods = Collections.unmodifiableList(m);
        }
    }

    static {
        NativeLibrary.load();
    }

    private final Object lock = new Object();       // one call at a time on the native handle
    private final Object handleLock = new Object(); // cancel() against close(): never a freed handle
    private long handle;
    private final Map<String, Object> info;

    private Bundle(long handle) {
        this.handle = handle;
        @SuppressWarnings("unchecked")
        Map<String, Object> described = (Map<String, Object>) Json.parse(nativeDescribe(handle));
        this.info = described;
    }

    public static Bundle open(String dir) throws DeploycException {
        return open(dir, Check.FULL);
    }

    public static Bundle open(String dir, Check check) throws DeploycException {
        return new Bundle(nativeOpen(dir.getBytes(StandardCharsets.UTF_8), check == Check.SIZES));
    }

    public String name() {
        return (String) info.get("name");
    }

    public String version() {
        return (String) info.get("version");
    }

    /** The target profile the bundle was built for (e.g. arduino_q, snapdragon). */
    public String target() {
        return (String) info.get("target");
    }

    @SuppressWarnings("unchecked")
    public List<Port> inputs() {
        List<Port> out = new ArrayList<>();
        for (Object o : (List<Object>) info.get("inputs")) {
            Map<String, Object> p = (Map<String, Object>) o;
            out.add(new Port((String) p.get("name"), (String) p.get("type")));
        }
        return Collections.unmodifiableList(out);
    }

    @SuppressWarnings("unchecked")
    public List<String> outputs() {
        return Collections.unmodifiableList((List<String>) (List<?>) info.get("outputs"));
    }

    @SuppressWarnings("unchecked")
    public List<Program> programs() {
        List<Program> out = new ArrayList<>();
        for (Object o : (List<Object>) info.get("programs")) {
            out.add(new Program((Map<String, Object>) o));
        }
        return Collections.unmodifiableList(out);
    }

    /** Runs the whole pipeline. */
    public Result run(Inputs inputs) throws DeploycException {
        return run(inputs, null, "");
    }

    /** Runs the whole pipeline, a generate stage's text streamed to {@code listener} as it comes. */
    public Result run(Inputs inputs, TokenListener listener) throws DeploycException {
        return run(inputs, listener, "");
    }

    /** Runs the pipeline up to and including stage {@code until} ("" for all of it). */
    public Result run(Inputs inputs, TokenListener listener, String until) throws DeploycException {
        List<Inputs.Entry> entries = inputs.entries();
        byte[][] names = new byte[entries.size()][];
        byte[][] kinds = new byte[entries.size()][];
        byte[][] values = new byte[entries.size()][];
        for (int i = 0; i < entries.size(); i++) {
            names[i] = entries.get(i).name.getBytes(StandardCharsets.UTF_8);
            kinds[i] = entries.get(i).kind.getBytes(StandardCharsets.UTF_8);
            values[i] = entries.get(i).value;
        }
        synchronized (lock) {
            return new Result(nativeRun(live(), names, kinds, values, listener,
                    until.getBytes(StandardCharsets.UTF_8)));
        }
    }

    /** Stops the generation under way (from any thread); the run returns the text so far. */
    public void cancel() {
        synchronized (handleLock) {
            if (handle != 0) {
                nativeCancel(handle);
            }
        }
    }

    /**
     * Every program on its self-test vectors against the tolerances its build verified.
     * @throws SelfTestException when a program misses them (its report in the exception)
     */
    public SelfTest selfTest() throws DeploycException {
        SelfTest report;
        synchronized (lock) {
            report = new SelfTest(nativeSelfTest(live()));
        }
        if (!report.passed()) {
            StringBuilder why = new StringBuilder("self-test failed:");
            for (Map<String, Object> p : report.programs()) {
                if ("failed".equals(p.get("status"))) {
                    why.append(' ').append(p.get("program")).append(" (").append(p.get("reason")).append(')');
                }
            }
            throw new SelfTestException(why.toString(), report);
        }
        return report;
    }

    /** The XNNPACK threadpool's size (the bundle's profile sets it at open; 0 keeps the runtime's default). */
    public void setThreads(int threads) {
        synchronized (lock) {
            nativeSetThreads(live(), threads);
        }
    }

    public int threads() {
        synchronized (lock) {
            return nativeThreads(live());
        }
    }

    @Override
    public void close() {
        synchronized (lock) {
            synchronized (handleLock) {
                if (handle != 0) {
                    nativeClose(handle);
                    handle = 0;
                }
            }
        }
    }

    private long live() {
        if (handle == 0) {
            throw new IllegalStateException("bundle " + name() + " is closed");
        }
        return handle;
    }

    private static native long nativeOpen(byte[] dir, boolean quickCheck) throws DeploycException;

    private static native String nativeDescribe(long handle);

    private static native String nativeRun(long handle, byte[][] names, byte[][] kinds, byte[][] values,
                                           TokenListener listener, byte[] until) throws DeploycException;

    private static native void nativeCancel(long handle);

    private static native String nativeSelfTest(long handle) throws DeploycException;

    private static native void nativeSetThreads(long handle, int threads);

    private static native int nativeThreads(long handle);

    private static native void nativeClose(long handle);
}

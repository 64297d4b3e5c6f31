package dev.deployc;

/**
 * Loads libdeployc_jni: from the path in the system property {@code deployc.library} when set (what
 * {@code deployc native build --jni} prints), else by name from java.library.path (an APK's jniLibs/ABI/).
 */
final class NativeLibrary {
    private NativeLibrary() {
    }

    static void load() {
        String path = System.getProperty("deployc.library");
        if (path != null && !path.isEmpty()) {
            System.load(path);
        } else {
            System.loadLibrary("deployc_jni");
        }
    }
}

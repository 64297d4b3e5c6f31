package dev.deployc;

/**
 * A failure of the runtime under a bundle, with its message (the file, stage or input it names) and the
 * exit code the command-line runner would end with: 1 when the runtime failed (a program call, a failed
 * self-test), 2 for a bad bundle or bad input (a missing or corrupted file, a wrong input type).
 */
public class DeploycException extends Exception {
    private static final long serialVersionUID = 1L;
    private final int exitCode;

    public DeploycException(int exitCode, String message) {
        super(message);
        this.exitCode = exitCode;
    }

    /** 1: the runtime failed; 2: bad bundle or bad input. */
    public int exitCode() {
        return exitCode;
    }
}

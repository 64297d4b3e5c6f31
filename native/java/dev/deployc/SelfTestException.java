package dev.deployc;

/** A self-test with a program outside its tolerances: the message names each, {@link #report} holds them all. */
public final class SelfTestException extends DeploycException {
    private static final long serialVersionUID = 1L;
    private final transient SelfTest report;

    SelfTestException(String message, SelfTest report) {
        super(1, message);
        this.report = report;
    }

    public SelfTest report() {
        return report;
    }
}

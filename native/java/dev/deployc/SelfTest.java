package dev.deployc;

import java.util.List;
import java.util.Map;

/**
 * The bundle's self-test on this device: every program on its stored vectors, judged against the tolerances
 * its build verified (what an app runs on first start). {@link #json()} is the runner's --self-test report.
 */
public final class SelfTest {
    private final String json;
    private final Map<String, Object> root;

    @SuppressWarnings("unchecked")
    SelfTest(String json) {
        this.json = json;
        this.root = (Map<String, Object>) Json.parse(json);
    }

    public boolean passed() {
        return Boolean.TRUE.equals(root.get("passed"));
    }

    /** Per program: {program, backend, status (passed, failed, not-run), reason, min_cosine, min_sqnr_db, ...}. */
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> programs() {
        return (List<Map<String, Object>>) root.get("programs");
    }

    public String json() {
        return json;
    }
}

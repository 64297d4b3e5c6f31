package dev.deployc;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/**
 * The Java API on a bundle with a text input and a generated answer, in a JVM: the RAG bundle
 * (tests/runtime/test_jni.py) and a GGUF decoder's (tests/e2e/test_gguf_models.py). System properties:
 * deployc.bundle (an arduino_q bundle), deployc.name, deployc.input (its text input), deployc.expected (JSON:
 * per question, deployc run's answer, token count and, for a RAG bundle, sources), deployc.corrupt (a copy
 * with a flipped byte in runtime.bin), deployc.flipped (a bundle whose lock matches but one program's weight
 * is flipped: only its self-test can tell).
 */
public class BundleTest {
    private static String property(String name) {
        String v = System.getProperty(name);
        assertNotNull("system property " + name, v);
        return v;
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> expected() throws Exception {
        String text = new String(Files.readAllBytes(Paths.get(property("deployc.expected"))), StandardCharsets.UTF_8);
        return (List<Map<String, Object>>) Json.parse(text);
    }

    private static Inputs ask(String question) {
        return new Inputs().text(property("deployc.input"), question);
    }

    /** A question whose answer has at least 3 tokens (the cancellation tests stop it early). */
    private static Map<String, Object> longAnswer() throws Exception {
        for (Map<String, Object> q : expected()) {
            if (((Number) q.get("tokens")).longValue() >= 3) {
                return q;
            }
        }
        throw new AssertionError("no expected answer of 3 tokens or more");
    }

    @Test
    public void describesTheBundle() throws Exception {
        try (Bundle b = Bundle.open(property("deployc.bundle"))) {
            assertEquals(property("deployc.name"), b.name());
            assertEquals("arduino_q", b.target());
            assertEquals(1, b.inputs().size());
            assertEquals(property("deployc.input"), b.inputs().get(0).name);
            assertEquals("text", b.inputs().get(0).type);
            assertTrue(b.outputs().contains("answer"));
            assertFalse(b.programs().isEmpty());
            for (Bundle.Program p : b.programs()) {
                assertEquals("passed", p.verification);
                assertTrue(p.sizeBytes > 0 && p.methods.contains("forward"));
            }
            assertEquals(4, b.threads());  // the arduino_q profile's
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    public void answersAreDeploycRunsAndStreamTokenByToken() throws Exception {
        try (Bundle b = Bundle.open(property("deployc.bundle"))) {
            for (Map<String, Object> q : expected()) {
                StringBuilder streamed = new StringBuilder();
                List<String> pieces = new ArrayList<>();
                Result r = b.run(ask((String) q.get("question")), piece -> {
                    pieces.add(piece);
                    streamed.append(piece);
                    return true;
                });
                String answer = r.text("answer");
                assertEquals(q.get("answer"), answer);
                assertEquals(answer, streamed.toString());
                assertEquals(((Number) q.get("tokens")).longValue(), ((Number) r.generation().get("tokens")).longValue());
                assertFalse(r.cancelled());
                if (q.containsKey("source_ids")) {  // a RAG bundle: the same passages
                    List<Object> ids = new ArrayList<>();
                    for (Chunk c : r.chunks("sources")) {
                        ids.add(c.id);
                    }
                    assertEquals(q.get("source_ids"), ids);
                    assertEquals(q.get("first_source"), r.chunks("sources").get(0).source);
                    assertTrue(pieces.size() > 1);
                }
                // Without a listener: the same answer.
                assertEquals(answer, b.run(ask((String) q.get("question"))).text("answer"));
            }
        }
    }

    @Test
    public void aListenerCancelsAndTheAnswerIsTheTextSoFar() throws Exception {
        Map<String, Object> q = longAnswer();
        String question = (String) q.get("question");
        try (Bundle b = Bundle.open(property("deployc.bundle"))) {
            StringBuilder streamed = new StringBuilder();
            int[] calls = {0};
            Result r = b.run(ask(question), piece -> {
                streamed.append(piece);
                return ++calls[0] < 3;
            });
            assertTrue(r.cancelled());
            assertEquals(3, calls[0]);
            assertEquals(3L, ((Number) r.generation().get("tokens")).longValue());
            assertEquals(streamed.toString(), r.text("answer"));
            // cancel() from the callback, as a stop button's handler would call it
            calls[0] = 0;
            r = b.run(ask(question), piece -> {
                if (++calls[0] == 2) {
                    b.cancel();
                }
                return true;
            });
            assertTrue(r.cancelled());
            assertEquals(2, calls[0]);
            // and the next run is whole again
            assertEquals(q.get("answer"), b.run(ask(question)).text("answer"));
        }
    }

    @Test
    public void cancelFromAnotherThread() throws Exception {
        String question = (String) longAnswer().get("question");
        try (Bundle b = Bundle.open(property("deployc.bundle"))) {
            Object gate = new Object();
            boolean[] cancelled = {false};
            Thread stopper = new Thread(() -> {
                synchronized (gate) {
                    while (!cancelled[0]) {
                        try {
                            gate.wait();
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                }
                b.cancel();
            });
            stopper.start();
            int[] calls = {0};
            Result r = b.run(ask(question), piece -> {
                if (++calls[0] == 1) {
                    synchronized (gate) {
                        cancelled[0] = true;
                        gate.notifyAll();
                    }
                    try {
                        stopper.join();  // the other thread's cancel() has landed before the next token
                    } catch (InterruptedException e) {
                        throw new AssertionError(e);
                    }
                }
                return true;
            });
            assertTrue(r.cancelled());
            assertEquals(1, calls[0]);
        }
    }

    @Test
    public void aListenersExceptionComesOutOfRunAndTheBundleStaysUsable() throws Exception {
        Map<String, Object> q = longAnswer();
        String question = (String) q.get("question");
        RuntimeException boom = new IllegalStateException("the UI is gone");
        try (Bundle b = Bundle.open(property("deployc.bundle"))) {
            try {
                b.run(ask(question), piece -> {
                    throw boom;
                });
                fail("the listener's exception was lost");
            } catch (IllegalStateException e) {
                assertSame(boom, e);
            }
            assertEquals(q.get("answer"), b.run(ask(question)).text("answer"));
        }
    }

    private static DeploycException failure(Call call) {
        try {
            call.run();
        } catch (DeploycException e) {
            return e;
        } catch (Exception e) {
            throw new AssertionError("expected a DeploycException, got " + e, e);
        }
        throw new AssertionError("expected a DeploycException");
    }

    private interface Call {
        void run() throws Exception;
    }

    @Test
    public void badBundlesAndBadInputsThrowTheRuntimesMessage() throws Exception {
        DeploycException e = failure(() -> Bundle.open("/nonexistent/bundle"));
        assertEquals(2, e.exitCode());
        assertTrue(e.getMessage(), e.getMessage().contains("/nonexistent/bundle"));

        e = failure(() -> Bundle.open(property("deployc.corrupt")));
        assertEquals(2, e.exitCode());
        assertTrue(e.getMessage(), e.getMessage().contains("runtime.bin"));

        try (Bundle b = Bundle.open(property("deployc.bundle"))) {
            String input = property("deployc.input");
            e = failure(() -> b.run(new Inputs().image(input, new int[] {0xFF0000}, 1, 1)));
            assertEquals(2, e.exitCode());
            assertEquals("input " + input + " is text; given an image", e.getMessage());
            e = failure(() -> b.run(new Inputs().text("no_such_input", "x")));
            assertEquals(2, e.exitCode());
            assertTrue(e.getMessage(), e.getMessage().contains("unknown pipeline input no_such_input"));
            e = failure(() -> b.run(ask("caf\u00e9"), null, "no_such_stage"));
            assertEquals(2, e.exitCode());
            assertTrue(e.getMessage(), e.getMessage().contains("no_such_stage"));
            // a question far past the context: cut to fit, as deployc run cuts it
            StringBuilder longer = new StringBuilder();
            for (int i = 0; i < 400; i++) {
                longer.append("bees ");
            }
            Result r = b.run(ask(longer + "How do honeybees find flowers?"));
            assertTrue(((Number) r.generation().get("prompt_tokens")).longValue() > 0);
        }
    }

    @Test
    public void selfTestPassesHereAndAFlippedWeightFailsIt() throws Exception {
        try (Bundle b = Bundle.open(property("deployc.bundle"))) {
            SelfTest t = b.selfTest();
            assertTrue(t.passed());
            for (Map<String, Object> p : t.programs()) {
                assertEquals("passed", p.get("status"));
            }
        }
        try (Bundle b = Bundle.open(property("deployc.flipped"))) {
            try {
                b.selfTest();
                fail("a flipped weight passed the self-test");
            } catch (SelfTestException e) {
                assertEquals(1, e.exitCode());
                assertTrue(e.getMessage(), e.getMessage().startsWith("self-test failed: mlp_fp32 ("));
                assertFalse(e.report().passed());
            }
        }
    }

    @Test
    public void aClosedBundleRefusesCallsAndClosesTwice() throws Exception {
        Bundle b = Bundle.open(property("deployc.bundle"));
        b.close();
        b.close();
        b.cancel();  // nothing to cancel: no error
        try {
            b.run(ask("x"));
            fail("a closed bundle ran");
        } catch (IllegalStateException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("closed"));
        }
    }

    private static long residentKb() throws Exception {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        }
        throw new AssertionError("no VmRSS");
    }

    @Test
    public void openingAndClosing200TimesLeaksNothing() throws Exception {
        String question = (String) expected().get(0).get("question");
        // Resident memory grows over the first ~200 cycles (the JIT, the allocators' arenas) and then only
        // moves up and down with where the allocator's heap ends; a leak raises its floor. So: the lowest
        // resident size over cycles 200-249 against the lowest over 350-399 (the Java heap is fixed and
        // resident from the start: tests/helpers/jvm.py).
        long early = Long.MAX_VALUE;
        long late = Long.MAX_VALUE;
        for (int i = 0; i < 400; i++) {
            try (Bundle b = Bundle.open(property("deployc.bundle"), Bundle.Check.SIZES)) {
                // every program loaded (the pipeline opens them all) and run once: the prompt's prefill
                b.run(ask(question), piece -> false);
            }
            if (i >= 200 && i < 250) {
                early = Math.min(early, residentKb());
            } else if (i >= 350) {
                late = Math.min(late, residentKb());
            }
        }
        long grown = late - early;
        System.out.println("resident floor rise over 150 open/close cycles: " + grown + " kB");
        assertTrue("resident memory's floor rose by " + grown + " kB over 150 cycles", grown < 2 * 1024);
    }
}

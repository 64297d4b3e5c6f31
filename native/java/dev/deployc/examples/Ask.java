package dev.deployc.examples;

import dev.deployc.Bundle;
import dev.deployc.Chunk;
import dev.deployc.DeploycException;
import dev.deployc.Inputs;
import dev.deployc.Result;

/**
 * The Java API's example app: asks a RAG bundle questions, the answer streamed as it is generated, then the
 * passages it came from.
 *
 * <pre>
 * deployc native build --jni
 * java -Ddeployc.library=native/build/libdeployc_jni.so -cp native/build/deployc.jar \
 *     dev.deployc.examples.Ask dist/rag-offline/1.0.0/arduino_q "How do honeybees find flowers?"
 * </pre>
 */
public final class Ask {
    private Ask() {
    }

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: Ask BUNDLE QUESTION [QUESTION ...]");
            System.exit(2);
        }
        try (Bundle bundle = Bundle.open(args[0])) {
            String input = bundle.inputs().get(0).name;
            for (int i = 1; i < args.length; i++) {
                System.out.println("Q: " + args[i]);
                System.out.print("A: ");
                Result r = bundle.run(new Inputs().text(input, args[i]), piece -> {
                    System.out.print(piece);
                    System.out.flush();
                    return true;
                });
                System.out.println();
                for (Chunk c : r.chunks("sources")) {
                    System.out.printf("   %s (%.3f)%n", c.source, c.score);
                }
                System.out.printf("   %s tokens, first after %.0f ms, then %.1f ms each%n",
                        r.generation().get("tokens"), ((Number) r.generation().get("first_token_ms")).doubleValue(),
                        ((Number) r.generation().get("per_token_ms")).doubleValue());
            }
        } catch (DeploycException e) {
            System.err.println("error: " + e.getMessage());
            System.exit(e.exitCode());
        }
    }
}

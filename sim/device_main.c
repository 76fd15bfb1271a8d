/* pos-sim-device: the device process of a virtual GPU of the simulated driver. The driver
 * (build/sim/libcuda.so.1) starts it when the first process of an instance attaches; it lives
 * in that library (sim/driver/device.c), which this program links (docs/sim.md). */
int pos_sim_device_main(int argc, char **argv);

int main(int argc, char **argv)
{
    return pos_sim_device_main(argc, argv);
}
